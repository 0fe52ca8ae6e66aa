//! The command line's shape: every subcommand and option, parsed by clap
//! (generated help, man pages and completions; typed values; unknown
//! options refused). What each command does is in the sibling modules.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use sluice::config::source::Source;

#[derive(Parser)]
#[command(name = "sluice", version, about = "Sluice mail transfer agent")]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Subcommand)]
pub(crate) enum Command {
    /// Run the MTA (the embedded default configuration without --config).
    Serve(SourceArgs),
    /// Check a configuration: parse it and build its tables and routes.
    CheckConfig(SourceArgs),
    /// Print the settings in force, like postconf (-n: only those set,
    /// -d: the defaults); KEYs are settings or sections (`smtpd.listen`).
    Config(ShowConfigArgs),
    /// Where an address goes, like sendmail -bv: RCPT's answer, aliases,
    /// the next hop and its TLS level. Nothing is sent.
    Address {
        #[command(flatten)]
        source: SourceArgs,
        /// JSON instead of text.
        #[arg(long)]
        json: bool,
        /// The addresses to explain.
        #[arg(required = true)]
        addresses: Vec<String>,
    },
    /// Look a key up in a table, like postmap -q (exit 1: not found; 75:
    /// the table could not answer).
    Lookup {
        #[command(flatten)]
        source: SourceArgs,
        /// The table's name in `[tables]`, or a Postfix TYPE:NAME
        /// (hash:/etc/postfix/virtual, pcre:/etc/postfix/checks.pcre).
        table: String,
        /// The key, as given (no address search order).
        key: String,
    },
    /// Make the running daemon read its configuration again (postfix
    /// reload); prints what it applied, or why it refused (exit 1).
    Reload(ConfigArg),
    /// Check the aliases files of `[system] alias_database` (Postfix's
    /// newaliases): prints postalias's warnings, exit 1 when one cannot be
    /// read or is writable by others; then a running daemon reloads
    /// (the text file is what it reads: there is no .db to build).
    Newaliases(ConfigArg),
    /// Stop the running daemon (postfix stop): it drains and exits;
    /// returns once it has.
    Stop(ConfigArg),
    /// Is the daemon running (postfix status): pid, uptime, listeners
    /// (exit 1: not running).
    Status(ConfigArg),
    /// Read a password on stdin, print its argon2id hash for an `[auth]` table.
    HashPassword,
    /// Make a DKIM key pair: the private key to a file, the DNS record to stdout.
    DkimKeygen(KeygenArgs),
    /// Translate a Postfix configuration (DIR/main.cf, default
    /// /etc/postfix) into OUT/sluice.toml, with OUT/report.txt saying what
    /// became of every parameter (exit 1: the result does not load).
    ImportPostfix {
        /// Postfix's configuration directory.
        #[arg(default_value = "/etc/postfix")]
        dir: PathBuf,
        /// A new directory for sluice.toml and report.txt.
        #[arg(long)]
        out: PathBuf,
        /// The host name Postfix's computed defaults use when main.cf
        /// sets no myhostname (default: this machine's).
        #[arg(long)]
        hostname: Option<String>,
    },
    /// Administer the queue of a running daemon (like postqueue/postsuper).
    Queue(QueueArgs),
    /// Make the cluster's own CA for the shadow link: DIR/ca.pem, DIR/ca.key.
    ClusterCa {
        /// Where to write them (never overwritten).
        dir: PathBuf,
    },
    /// Make a node's shadow-link key and certificate, signed by the cluster CA.
    ClusterCert {
        /// The CA's directory (`sluice cluster-ca`).
        #[arg(long)]
        ca: PathBuf,
        /// The node's name (`[cluster] node`).
        #[arg(long)]
        node: String,
        /// Where to write NODE.pem and NODE.key (never overwritten).
        out: PathBuf,
    },
}

#[derive(Args)]
pub(crate) struct QueueArgs {
    #[command(flatten)]
    pub(crate) config: ConfigArg,
    /// Print JSON instead of text.
    #[arg(long, global = true)]
    pub(crate) json: bool,
    #[command(subcommand)]
    pub(crate) action: QueueAction,
}

#[derive(Subcommand)]
pub(crate) enum QueueAction {
    /// The queue, mailq-style (filters combine).
    List {
        /// Only mail from this envelope sender (the whole address, any case).
        #[arg(long)]
        sender: Option<String>,
        /// Only mail a login submitted (SMTP AUTH or a local account).
        #[arg(long)]
        login: Option<String>,
        /// Only mail to this recipient (the whole address, any case).
        #[arg(long)]
        recipient: Option<String>,
        /// Only mail with a recipient still to deliver in this domain.
        #[arg(long)]
        domain: Option<String>,
        /// active, deferred or hold.
        #[arg(long)]
        state: Option<String>,
    },
    /// One message: envelope, recipients, last reasons, attempts and the
    /// next retry, headers, log lines; with --body the whole message.
    Show {
        /// The queue ID.
        id: String,
        /// Print the whole message, header and body, after it (postcat -q).
        #[arg(long)]
        body: bool,
    },
    /// Retry deferred mail now (all, one message, or one domain's).
    Flush {
        /// The queue ID of one message.
        id: Option<String>,
        /// Only deferred mail with a recipient in this domain.
        #[arg(long)]
        domain: Option<String>,
    },
    /// Delete messages (no bounce): IDs, ALL, - (IDs on stdin), or a filter.
    Delete {
        /// Queue IDs, ALL, or - to read IDs one a line from stdin.
        ids: Vec<String>,
        /// Every deferred message (with --older-than: those older).
        #[arg(long)]
        all_deferred: bool,
        /// Seconds since arrival.
        #[arg(long)]
        older_than: Option<u64>,
    },
    /// Keep messages, do not deliver them (postsuper -h).
    Hold {
        /// Queue IDs, ALL, or - to read IDs one a line from stdin.
        #[arg(required = true)]
        ids: Vec<String>,
    },
    /// Deliver held messages again (postsuper -H); with --login or
    /// --sender, lift that account's sender-limit containment and release
    /// the mail it held.
    Release {
        /// Queue IDs, ALL, or - to read IDs one a line from stdin.
        #[arg(required_unless_present_any = ["login", "sender"])]
        ids: Vec<String>,
        /// A login contained by the sender limits.
        #[arg(long, conflicts_with_all = ["ids", "sender"])]
        login: Option<String>,
        /// A sender address contained by the sender limits.
        #[arg(long, conflicts_with = "ids")]
        sender: Option<String>,
    },
    /// Return messages to their senders now.
    Bounce {
        /// Queue IDs, ALL, or - to read IDs one a line from stdin.
        #[arg(required = true)]
        ids: Vec<String>,
    },
    /// Deliver messages again from scratch now, out of hold, their attempt
    /// count and backoff forgotten (postsuper -r).
    Requeue {
        /// Queue IDs, ALL, or - to read IDs one a line from stdin.
        #[arg(required = true)]
        ids: Vec<String>,
    },
}

#[derive(Args)]
pub(crate) struct ShowConfigArgs {
    #[command(flatten)]
    pub(crate) source: SourceArgs,
    /// Only the settings the file and -o set (postconf -n).
    #[arg(short = 'n', conflicts_with = "defaults")]
    pub(crate) set: bool,
    /// The defaults (postconf -d).
    #[arg(short = 'd')]
    pub(crate) defaults: bool,
    /// JSON instead of TOML.
    #[arg(long)]
    pub(crate) json: bool,
    /// Print passwords and secrets instead of "(hidden)".
    #[arg(long)]
    pub(crate) show_secrets: bool,
    /// What the running daemon loaded (asked on its admin socket), with
    /// the addresses it listens on and its tables.
    #[arg(long, conflicts_with_all = ["set", "defaults", "show_secrets"])]
    pub(crate) running: bool,
    /// Settings (`hostname`, `smtpd.listen`) or sections (`smtpd`).
    pub(crate) keys: Vec<String>,
}

#[derive(Args)]
pub(crate) struct KeygenArgs {
    /// The signing domain (d=).
    #[arg(long)]
    pub(crate) domain: String,
    /// The selector (s=): the record is SELECTOR._domainkey.DOMAIN.
    #[arg(long)]
    pub(crate) selector: String,
    /// rsa or ed25519.
    #[arg(long, default_value = "rsa")]
    pub(crate) algorithm: String,
    /// RSA key size.
    #[arg(long, default_value_t = 2048)]
    pub(crate) bits: usize,
    /// Where to write the private key (PEM, mode 0600; never overwritten).
    #[arg(long)]
    pub(crate) out: PathBuf,
}

/// A configuration and `-o` overrides (`serve`, `check-config`, `config`).
#[derive(Args)]
pub(crate) struct SourceArgs {
    #[command(flatten)]
    pub(crate) config: ConfigArg,
    /// Override one setting, e.g. `-o smtpd.listen=127.0.0.1:2626` or
    /// `-o queue.minimal_backoff_secs=60` (TOML values; a list setting
    /// takes `a,b`). Repeatable; kept across reloads.
    #[arg(short = 'o', value_name = "KEY=VALUE")]
    pub(crate) overrides: Vec<sluice::config::source::Override>,
}

impl SourceArgs {
    pub(crate) fn source(&self) -> Source {
        Source::new(self.config.config.as_deref(), self.overrides.clone())
    }

    /// For an administrator's tool: the file postconf would read
    /// (`tools::locate::config_file`), else the embedded default.
    pub(crate) fn system_source(&self) -> Source {
        let path = sluice::tools::locate::config_file(self.config.config.as_deref());
        Source::new(path.as_deref(), self.overrides.clone())
    }
}

#[derive(Args)]
pub(crate) struct ConfigArg {
    /// The TOML configuration file (before or after a subcommand).
    #[arg(long, global = true)]
    pub(crate) config: Option<PathBuf>,
}
