//! Local accounts made by a test (useradd; the suite runs as root), for
//! what an ordinary local user may and may not do.

use std::process::Command;

/// A system account made for the test, removed when dropped.
pub struct TestUser {
    pub name: String,
    pub uid: u32,
}

impl TestUser {
    /// A new system account, `tag` making its name unique in the run.
    pub fn create(tag: &str) -> TestUser {
        let name = format!("sl{tag}{}", std::process::id());
        let out = Command::new("useradd")
            .args([
                "--system",
                "--no-create-home",
                "--shell",
                "/usr/sbin/nologin",
                &name,
            ])
            .output()
            .expect("useradd (passwd package)");
        assert!(out.status.success(), "useradd: {out:?}");
        let id = Command::new("id").args(["-u", &name]).output().unwrap();
        let uid = String::from_utf8_lossy(&id.stdout).trim().parse().unwrap();
        TestUser { name, uid }
    }
}

impl TestUser {
    /// As [`TestUser::create`], with the home directory `home` (made,
    /// 0755, the account's): for mail delivered into it or a `.forward`.
    pub fn with_home(tag: &str, home: &std::path::Path) -> TestUser {
        let name = format!("sl{tag}{}", std::process::id());
        let out = Command::new("useradd")
            .args(["--system", "--shell", "/usr/sbin/nologin", "--home-dir"])
            .arg(home)
            .arg(&name)
            .output()
            .expect("useradd (passwd package)");
        assert!(out.status.success(), "useradd: {out:?}");
        let id = Command::new("id").args(["-u", &name]).output().unwrap();
        let uid = String::from_utf8_lossy(&id.stdout).trim().parse().unwrap();
        let user = TestUser { name, uid };
        std::fs::create_dir_all(home).unwrap();
        let gid = user.gid();
        std::os::unix::fs::chown(home, Some(uid), Some(gid)).unwrap();
        user
    }

    /// The account's primary group id (useradd made a group of its name).
    pub fn gid(&self) -> u32 {
        let id = Command::new("id")
            .args(["-g", &self.name])
            .output()
            .unwrap();
        String::from_utf8_lossy(&id.stdout).trim().parse().unwrap()
    }

    /// Makes the account a member of `group` (a supplementary group).
    pub fn join(&self, group: &str) {
        let out = Command::new("usermod")
            .args(["-a", "-G", group, &self.name])
            .output()
            .expect("usermod (passwd package)");
        assert!(out.status.success(), "usermod: {out:?}");
    }
}

impl Drop for TestUser {
    fn drop(&mut self) {
        let _ = Command::new("userdel").arg(&self.name).status();
    }
}
