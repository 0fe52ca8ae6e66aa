//! A real OpenLDAP `slapd` for tests: own config and mdb database in a temp
//! dir, loaded offline with `slapadd`, listening on a free loopback port.
//! Installs Debian's slapd and ldap-utils if they are missing.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Slapd {
    pub port: u16,
    /// The `ldaps://` port (the certificate is `ca()`, for 127.0.0.1).
    pub tls_port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

pub const BASE: &str = "dc=example,dc=com";

fn ensure_installed() {
    super::ensure_package("/usr/sbin/slapd", "slapd");
    super::ensure_package("/usr/sbin/slapadd", "slapd");
    super::ensure_package("/usr/bin/ldapsearch", "ldap-utils");
}

/// The LDIF for `users` users `user1..` in example.com, plus aliases.
pub fn ldif(users: usize) -> String {
    let mut s = format!(
        "dn: {BASE}\nobjectClass: dcObject\nobjectClass: organization\ndc: example\no: Example\n\n\
         dn: ou=people,{BASE}\nobjectClass: organizationalUnit\nou: people\n\n\
         dn: ou=aliases,{BASE}\nobjectClass: organizationalUnit\nou: aliases\n\n"
    );
    for i in 1..=users {
        s.push_str(&format!(
            "dn: uid=user{i},ou=people,{BASE}\nobjectClass: inetOrgPerson\nobjectClass: posixAccount\n\
             cn: user{i}\nsn: user{i}\nuid: user{i}\nuidNumber: {}\ngidNumber: 10000\n\
             homeDirectory: example.com/user{i}/Maildir/\nmail: user{i}@example.com\nuserPassword: pw{i}\n\n",
            10000 + i
        ));
    }
    s.push_str(&format!(
        "dn: cn=sales@example.com,ou=aliases,{BASE}\nobjectClass: nisMailAlias\ncn: sales@example.com\n\
         rfc822MailMember: user1@example.com\nrfc822MailMember: user2@example.com\n\n\
         dn: cn=@catch.example.com,ou=aliases,{BASE}\nobjectClass: nisMailAlias\ncn: @catch.example.com\n\
         rfc822MailMember: user3@example.com\n\n"
    ));
    s
}

impl Slapd {
    pub fn start(name: &str, users: usize) -> Slapd {
        Slapd::start_as(name, Some(users), "", "")
    }

    /// A syncrepl provider (the `syncprov` overlay) with `users` users.
    pub fn provider(name: &str, users: usize) -> Slapd {
        Slapd::start_as(
            name,
            Some(users),
            "moduleload syncprov\n",
            "index entryCSN,entryUUID eq\noverlay syncprov\nsyncprov-checkpoint 10 1\n",
        )
    }

    /// A syncrepl consumer of `provider` (refresh and persist), starting
    /// empty; it retries the provider every second while it is away.
    pub fn consumer(name: &str, provider: &Slapd) -> Slapd {
        let db = format!(
            "index entryCSN,entryUUID eq\n\
             syncrepl rid=001 provider={} type=refreshAndPersist searchbase=\"{BASE}\" \
             bindmethod=simple binddn=\"cn=admin,{BASE}\" credentials=secret retry=\"1 +\"\n",
            provider.uri()
        );
        Slapd::start_as(name, None, "", &db)
    }

    /// Adds an entry (LDIF) through the protocol, as the administrator.
    pub fn add(&self, ldif: &str) {
        let mut child = Command::new("ldapadd")
            .args([
                "-x",
                "-H",
                &self.uri(),
                "-D",
                &format!("cn=admin,{BASE}"),
                "-w",
                "secret",
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .expect("run ldapadd");
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(ldif.as_bytes())
            .unwrap();
        assert!(child.wait().unwrap().success(), "ldapadd failed");
    }

    /// Whether an entry with this mail address is there (ldapsearch).
    pub fn has_mail(&self, mail: &str) -> bool {
        let out = Command::new("ldapsearch")
            .args([
                "-x",
                "-LLL",
                "-H",
                &self.uri(),
                "-b",
                BASE,
                &format!("(mail={mail})"),
                "dn",
            ])
            .output()
            .expect("run ldapsearch");
        String::from_utf8_lossy(&out.stdout).contains("dn: ")
    }

    fn start_as(name: &str, users: Option<usize>, global: &str, db: &str) -> Slapd {
        ensure_installed();
        let dir = std::env::temp_dir().join(format!("sluice-slapd-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("db")).unwrap();
        let made = rcgen::generate_simple_self_signed(vec!["127.0.0.1".into(), "localhost".into()])
            .unwrap();
        std::fs::write(dir.join("cert.pem"), made.cert.pem()).unwrap();
        std::fs::write(dir.join("key.pem"), made.signing_key.serialize_pem()).unwrap();
        let conf = format!(
            "include /etc/ldap/schema/core.schema\n\
             include /etc/ldap/schema/cosine.schema\n\
             include /etc/ldap/schema/inetorgperson.schema\n\
             include /etc/ldap/schema/nis.schema\n\
             include /etc/ldap/schema/misc.schema\n\
             modulepath /usr/lib/ldap\nmoduleload back_mdb\n{global}\
             pidfile {dir}/slapd.pid\n\
             TLSCertificateFile {dir}/cert.pem\nTLSCertificateKeyFile {dir}/key.pem\n\
             database mdb\nmaxsize 268435456\nsuffix \"{BASE}\"\n\
             rootdn \"cn=admin,{BASE}\"\nrootpw secret\ndirectory {dir}/db\n\
             index mail eq\nindex cn eq\nindex objectClass eq\n{db}",
            dir = dir.display()
        );
        std::fs::write(dir.join("slapd.conf"), conf).unwrap();
        if let Some(users) = users {
            std::fs::write(dir.join("data.ldif"), ldif(users)).unwrap();
            let out = Command::new("/usr/sbin/slapadd")
                .arg("-q")
                .arg("-f")
                .arg(dir.join("slapd.conf"))
                .arg("-l")
                .arg(dir.join("data.ldif"))
                .output()
                .expect("run slapadd");
            assert!(
                out.status.success(),
                "slapadd failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let free = || {
            std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port()
        };
        let (port, tls_port) = (free(), free());
        let mut slapd = Slapd {
            port,
            tls_port,
            dir,
            child: None,
        };
        slapd.restart();
        slapd
    }

    pub fn uri(&self) -> String {
        format!("ldap://127.0.0.1:{}", self.port)
    }

    pub fn ldaps_uri(&self) -> String {
        format!("ldaps://127.0.0.1:{}", self.tls_port)
    }

    /// The server certificate, to trust as a CA.
    pub fn ca(&self) -> PathBuf {
        self.dir.join("cert.pem")
    }

    /// Starts (again) on the same port and waits until it answers.
    pub fn restart(&mut self) {
        self.stop();
        let log = std::fs::File::create(self.dir.join("slapd.log")).unwrap();
        let child = Command::new("/usr/sbin/slapd")
            .arg("-f")
            .arg(self.dir.join("slapd.conf"))
            .arg("-h")
            .arg(format!(
                "ldap://127.0.0.1:{}/ ldaps://127.0.0.1:{}/",
                self.port, self.tls_port
            ))
            .arg("-d")
            .arg("0")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start slapd");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(15);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err()
            || std::net::TcpStream::connect(("127.0.0.1", self.tls_port)).is_err()
        {
            assert!(
                Instant::now() < deadline,
                "slapd did not start; see {}",
                self.dir.join("slapd.log").display()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Slapd {
    fn drop(&mut self) {
        self.stop();
    }
}
