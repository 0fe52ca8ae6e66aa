//! Man pages and shell completions made from the `sluice` command's own
//! clap definitions: `sluice generate man DIR` and `sluice generate
//! completions SHELL`, for packagers (packaging/build-deb.sh runs them on
//! the binary it packages, so the pages and completions always describe
//! that binary). `generate` is parsed here, before and apart from the
//! `sluice` command, so that no page, completion or help lists it.
//!
//! The pages are section 8 (system administration, as Postfix's are):
//! `sluice.8`, and one page per visible subcommand at every depth, named
//! by its path (`sluice-queue.8`, `sluice-queue-list.8`). Hidden
//! subcommands get no page.
//!
//! Trust: none needed; the command definitions are the binary's own, and
//! the directory is the caller's. Invariant: every visible argument and
//! subcommand has help text ([`undocumented`] lists those that do not; a
//! unit test of the `sluice` command keeps the list empty).

use std::ffi::OsString;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Command, Parser};
use clap_complete::Shell;

/// The manual section of every page.
pub const SECTION: &str = "8";

/// `sluice generate …`.
#[derive(Debug, Parser)]
#[command(
    name = "sluice generate",
    bin_name = "sluice generate",
    about = "Man pages and shell completions of the sluice command"
)]
struct GenerateCli {
    #[command(subcommand)]
    what: Generate,
}

/// What `sluice generate` makes.
#[derive(Debug, clap::Subcommand)]
pub enum Generate {
    /// Man pages (section 8): DIR/sluice.8 and one page per subcommand
    /// (DIR/sluice-queue.8, DIR/sluice-queue-list.8, …); their paths on
    /// stdout.
    Man {
        /// Where to write them (made if missing; pages there replaced).
        dir: PathBuf,
    },
    /// A completion script for SHELL, on stdout.
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        #[arg(value_enum)]
        shell: Shell,
    },
}

/// `sluice generate ARGS…` (`args` from `generate` on) for the command
/// `cmd` (the whole `sluice` command, `Cli::command()`): exit 0, 1 when
/// writing failed, 2 for a usage error.
pub fn main(cmd: Command, args: impl IntoIterator<Item = impl Into<OsString> + Clone>) -> ExitCode {
    let parsed = match GenerateCli::try_parse_from(args) {
        Ok(p) => p,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2));
        }
    };
    match run(parsed.what, cmd) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sluice generate: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Runs `sluice generate …` for the command `cmd`.
pub fn run(what: Generate, cmd: Command) -> io::Result<()> {
    let mut out = io::stdout().lock();
    match what {
        Generate::Man { dir } => {
            let pages = man_pages(cmd, &dir)
                .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", dir.display())))?;
            for page in pages {
                writeln!(out, "{}", page.display())?;
            }
        }
        Generate::Completions { shell } => completions(shell, cmd, &mut out)?,
    }
    out.flush()
}

/// Writes the man pages of `cmd` and its visible subcommands into `dir`;
/// returns their paths, `cmd`'s own first.
pub fn man_pages(cmd: Command, dir: &Path) -> io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    // Built once at the top, so every subcommand knows its full name
    // (`sluice queue list`) and the global options (--config).
    let mut cmd = cmd.disable_help_subcommand(true);
    cmd.build();
    // Every page's footer names the program and its version (a
    // subcommand has no version of its own).
    let source = format!(
        "{} {}",
        cmd.get_name(),
        cmd.get_version().unwrap_or_default()
    );
    let mut written = Vec::new();
    write_pages(&cmd, source.trim_end(), dir, &mut written)?;
    Ok(written)
}

fn write_pages(
    cmd: &Command,
    source: &str,
    dir: &Path,
    written: &mut Vec<PathBuf>,
) -> io::Result<()> {
    let page = clap_mangen::Man::new(cmd.clone())
        .section(SECTION)
        .source(source)
        .manual("Sluice Manual");
    written.push(page.generate_to(dir)?);
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        write_pages(sub, source, dir, written)?;
    }
    Ok(())
}

/// Writes `shell`'s completion script for `cmd` to `out`.
pub fn completions(shell: Shell, mut cmd: Command, out: &mut dyn Write) -> io::Result<()> {
    let name = cmd.get_name().to_string();
    // clap_complete writes through `impl Write`; an error is kept and
    // returned instead of its panic on a closed pipe.
    let mut buf = Vec::new();
    clap_complete::generate(shell, &mut cmd, name, &mut buf);
    out.write_all(&buf)
}

/// The visible arguments and subcommands of `cmd` that have no help
/// text, as `sluice queue list --sender` or `sluice queue flush`.
pub fn undocumented(cmd: Command) -> Vec<String> {
    // clap's own `help` subcommand (which copies the others' help) aside.
    let mut cmd = cmd.disable_help_subcommand(true);
    cmd.build();
    let mut missing = Vec::new();
    collect_undocumented(&cmd, &mut missing);
    missing
}

fn collect_undocumented(cmd: &Command, missing: &mut Vec<String>) {
    let path = cmd.get_bin_name().unwrap_or(cmd.get_name()).to_string();
    for arg in cmd.get_arguments().filter(|a| !a.is_hide_set()) {
        if arg.get_help().is_none() && arg.get_long_help().is_none() {
            let name = match arg.get_long() {
                Some(long) => format!("--{long}"),
                None => arg.get_id().to_string().to_uppercase(),
            };
            missing.push(format!("{path} {name}"));
        }
    }
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        if sub.get_about().is_none() && sub.get_long_about().is_none() {
            missing.push(sub.get_bin_name().unwrap_or(sub.get_name()).to_string());
        }
        collect_undocumented(sub, missing);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Arg;

    fn sample() -> Command {
        Command::new("tool")
            .version("1.0")
            .about("A tool")
            .subcommand(
                Command::new("list")
                    .about("List things")
                    .arg(Arg::new("sender").long("sender").help("Only from him"))
                    .arg(Arg::new("bare").long("bare")),
            )
            .subcommand(Command::new("bare").arg(Arg::new("id")))
            .subcommand(Command::new("secret").hide(true).arg(Arg::new("x")))
    }

    #[test]
    fn generate_itself_is_documented() {
        use clap::CommandFactory;
        assert_eq!(undocumented(GenerateCli::command()), Vec::<String>::new());
    }

    #[test]
    fn arguments_and_subcommands_without_help_are_named() {
        assert_eq!(
            undocumented(sample()),
            ["tool list --bare", "tool bare", "tool bare ID"]
        );
    }

    #[test]
    fn a_page_per_visible_command_in_section_8() {
        let dir = tempfile::tempdir().unwrap();
        let pages = man_pages(sample(), dir.path()).unwrap();
        let names: Vec<_> = pages
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["tool.8", "tool-list.8", "tool-bare.8"]);
        let list = std::fs::read_to_string(&pages[1]).unwrap();
        assert!(list.contains("\n.TH tool-list 8  \"tool 1.0\" "), "{list}");
        assert!(list.contains("Only from him"), "{list}");
    }
}
