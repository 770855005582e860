//! Logging set-up in one call: text or JSON on stderr, at `--log-level` or as `RUST_LOG` says.
//!
//! The equivalent of kubebuilder's `zap.Options.BindFlags` and `ctrl.SetLogger`: [`LogArgs`]
//! are the flags (flattened into [`ManagerArgs`](super::flags::ManagerArgs) already), and
//! [`init`] installs the global `tracing` subscriber from them.
//!
//! ```no_run
//! use clap::Parser;
//! use controller_runtime::runtime::logging::{self, LogArgs};
//!
//! #[derive(Parser)]
//! struct Flags {
//!     #[command(flatten)]
//!     log: LogArgs,
//! }
//!
//! # fn main() -> Result<(), logging::Error> {
//! logging::init(&Flags::parse().log)?;
//! tracing::info!("logging to stderr");
//! # Ok(())
//! # }
//! ```

use std::io::IsTerminal as _;

use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::prelude::*;
use tracing_subscriber::{fmt, util::TryInitError};

/// How and what to log: `--log-level` and `--log-format`.
#[derive(Clone, Debug, clap::Args)]
pub struct LogArgs {
    /// The log level: error, warn, info, debug or trace (RUST_LOG overrides it).
    #[arg(long, default_value = "info")]
    pub log_level: String,
    /// The log format: text or json.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

impl Default for LogArgs {
    fn default() -> Self {
        LogArgs {
            log_level: "info".to_owned(),
            log_format: LogFormat::Text,
        }
    }
}

/// How each log line is written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// One human-readable line per event, coloured when stderr is a terminal.
    #[default]
    Text,
    /// One JSON object per line, for a log collector.
    Json,
}

/// Why logging could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `RUST_LOG` does not parse.
    #[error(
        "RUST_LOG={directives:?}: expected `level` or `module=level` directives, comma-separated: {source}"
    )]
    RustLog {
        /// The variable's value.
        directives: String,
        /// The parser's complaint.
        #[source]
        source: tracing_subscriber::filter::ParseError,
    },
    /// `--log-level` is not a level.
    #[error("--log-level {level:?}: expected error, warn, info, debug or trace")]
    Level {
        /// The flag's value.
        level: String,
    },
    /// A global subscriber is installed already.
    #[error("setting the global logger: {0}")]
    Init(#[source] TryInitError),
}

/// Installs the global subscriber: events go to stderr as `args.log_format` says, filtered
/// by [`filter`] (`RUST_LOG` when set, else `args.log_level`).
///
/// # Errors
///
/// [`Error::RustLog`] or [`Error::Level`] when the filter does not parse: a typo must not
/// silently change what is logged. [`Error::Init`] if a global subscriber is set already.
pub fn init(args: &LogArgs) -> Result<(), Error> {
    let filter = filter(std::env::var("RUST_LOG").ok().as_deref(), &args.log_level)?;
    let json = args.log_format == LogFormat::Json;
    let ansi = std::io::stderr().is_terminal();
    tracing_subscriber::registry()
        .with(filter)
        .with(json.then(|| fmt::layer().json().with_writer(std::io::stderr)))
        .with((!json).then(|| fmt::layer().with_ansi(ansi).with_writer(std::io::stderr)))
        .try_init()
        .map_err(Error::Init)
}

/// What is logged: `rust_log`'s directives when set and not blank (e.g. `info`, or
/// `memcached_operator=debug,info`: a default level and levels per module), else `level`.
///
/// # Errors
///
/// When the one used does not parse.
pub fn filter(rust_log: Option<&str>, level: &str) -> Result<Targets, Error> {
    match rust_log {
        Some(directives) if !directives.trim().is_empty() => {
            directives.parse().map_err(|source| Error::RustLog {
                directives: directives.to_owned(),
                source,
            })
        }
        _ => {
            let parsed = level.parse::<LevelFilter>().map_err(|_| Error::Level {
                level: level.to_owned(),
            })?;
            Ok(Targets::new().with_default(parsed))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use tracing::Level;

    #[test]
    fn rust_log_overrides_the_log_level_and_typos_in_either_are_errors() {
        let from_flag = filter(None, "warn").unwrap();
        assert!(from_flag.would_enable("memcached_operator", &Level::WARN));
        assert!(!from_flag.would_enable("memcached_operator", &Level::INFO));

        let from_env = filter(Some("memcached_operator=debug,error"), "warn").unwrap();
        assert!(from_env.would_enable("memcached_operator::reconcile", &Level::DEBUG));
        assert!(!from_env.would_enable("controller_runtime", &Level::WARN));
        assert!(
            filter(Some(" "), "info")
                .unwrap()
                .would_enable("x", &Level::INFO)
        );
        // RUST_LOG set: the flag is not read, so its typo does not matter.
        assert!(filter(Some("info"), "infoo").is_ok());

        let bad_flag = filter(None, "infoo").unwrap_err();
        assert_eq!(
            bad_flag.to_string(),
            "--log-level \"infoo\": expected error, warn, info, debug or trace"
        );
        let bad_env = filter(Some("memcached_operator=loud"), "info").unwrap_err();
        assert!(
            bad_env
                .to_string()
                .starts_with("RUST_LOG=\"memcached_operator=loud\": expected `level` or"),
            "{bad_env}"
        );
    }

    #[derive(Debug, Parser)]
    struct Flags {
        #[command(flatten)]
        log: LogArgs,
    }

    #[test]
    fn the_format_is_text_or_json_and_nothing_else() {
        let flags = Flags::try_parse_from(["x"]).unwrap();
        assert_eq!(flags.log.log_format, LogFormat::Text);
        assert_eq!(flags.log.log_level, "info");
        let json = Flags::try_parse_from(["x", "--log-format=json"]).unwrap();
        assert_eq!(json.log.log_format, LogFormat::Json);
        let err = Flags::try_parse_from(["x", "--log-format=yaml"]).unwrap_err();
        assert!(
            err.to_string().contains("[possible values: text, json]"),
            "{err}"
        );
    }
}
