//! `--config FILE` for Floe's server processes: a TOML file whose keys are the flags of the
//! command it configures (`data-dir = "/var/lib/floe"`, `listen = "0.0.0.0:7100"`), under
//! whatever the command line and the environment say: a flag given as an argument or through
//! its environment variable wins over the file, and the file over the flag's default.
//!
//! The file is read before the command line is parsed and becomes more arguments: values are
//! checked by the same parsers as the flags, so a key takes exactly what its flag takes. A
//! key that is not a flag of the command, a table, or a value its flag refuses is an error
//! naming the file, the line and the key.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use clap::{Arg, ArgAction, Command, CommandFactory, Parser};
use toml::de::{DeTable, DeValue};

/// The flag (and its environment variable) that names the file.
pub const FLAG: &str = "config";
/// The environment variable that names the file when the flag is absent.
pub const ENV: &str = "FLOE_CONFIG";
/// The flag that checks the settings and exits: an action, never a setting of the file.
pub const CHECK_FLAG: &str = "check-config";

/// Why a configuration file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigFileError {
    #[error("cannot read the configuration file {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}:{line}: not TOML: {message}")]
    Syntax {
        path: PathBuf,
        line: usize,
        message: String,
    },
    #[error("{path}:{line}: `{key}` is not a setting of `{command}` (see `{command} --help`)")]
    UnknownKey {
        path: PathBuf,
        line: usize,
        key: String,
        command: String,
    },
    #[error("{path}:{line}: `{key}`: {message}")]
    BadValue {
        path: PathBuf,
        line: usize,
        key: String,
        message: String,
    },
}

/// Why a command line with its configuration file could not be parsed.
#[derive(Debug, thiserror::Error)]
pub enum Failure {
    #[error(transparent)]
    File(#[from] ConfigFileError),
    /// The command line itself (including `--help` and `--version`, which clap reports
    /// this way).
    #[error(transparent)]
    Args(#[from] clap::Error),
}

/// Parses the process's command line as `P`, with the settings of `--config FILE` (or
/// `FLOE_CONFIG`) under it; prints the error and exits like clap otherwise.
pub fn parse<P: Parser>() -> P {
    let args: Vec<OsString> = std::env::args_os().collect();
    match try_parse_from::<P>(args, |name| std::env::var_os(name)) {
        Ok(parsed) => parsed,
        Err(Failure::Args(error)) => error.exit(),
        Err(Failure::File(error)) => {
            eprintln!("error: {}", floe_wire::ErrorChain(&error));
            std::process::exit(2);
        }
    }
}

/// Parses `args` as `P`, with the file's settings for the flags neither `args` nor the
/// environment (read through `env`) set. A value of the file that its flag's parser refuses
/// is reported at its line of the file.
pub fn try_parse_from<P: Parser>(
    args: Vec<OsString>,
    env: impl Fn(&str) -> Option<OsString>,
) -> Result<P, Failure> {
    let (args, from_file) = with_file::<P>(args, &env)?;
    P::try_parse_from(args).map_err(|error| match blame(&error, &from_file) {
        Some(setting) => Failure::File(ConfigFileError::BadValue {
            path: setting.path.clone(),
            line: setting.line,
            key: setting.key.clone(),
            message: first_line(&error.to_string()),
        }),
        None => Failure::Args(error),
    })
}

/// Where a flag added from the file came from.
#[derive(Debug, Clone)]
struct Setting {
    path: PathBuf,
    line: usize,
    key: String,
    /// The key and its value as flags.
    flags: Vec<OsString>,
}

/// `args` followed by the file's settings as flags, for the flags neither `args` nor the
/// environment set, and where each came from. Unchanged when no file is named.
fn with_file<P: CommandFactory>(
    mut args: Vec<OsString>,
    env: &impl Fn(&str) -> Option<OsString>,
) -> Result<(Vec<OsString>, Vec<Setting>), ConfigFileError> {
    let mut root = P::command();
    // Built, subcommands carry the global flags too (e.g. `log-format`).
    root.build();
    let command = invoked(&root, &args);
    let Some(path) = flag_value(&args, FLAG)
        .or_else(|| env(ENV))
        .map(PathBuf::from)
    else {
        return Ok((args, Vec::new()));
    };
    if !command.get_arguments().any(|a| a.get_long() == Some(FLAG)) {
        // The subcommand takes no file (e.g. `floe-broker certs`): clap refuses the flag.
        return Ok((args, Vec::new()));
    }
    let text = std::fs::read_to_string(&path).map_err(|source| ConfigFileError::Read {
        path: path.clone(),
        source,
    })?;
    let name = command_name(&root, command);
    let mut from_file = Vec::new();
    for (arg, setting) in settings(&path, &text, command, &name)? {
        if !given(arg, &args, env) {
            args.extend(setting.flags.iter().cloned());
            from_file.push(setting);
        }
    }
    Ok((args, from_file))
}

/// The setting of the file a refused value came from, if it did.
fn blame<'s>(error: &clap::Error, from_file: &'s [Setting]) -> Option<&'s Setting> {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if !matches!(
        error.kind(),
        ErrorKind::InvalidValue | ErrorKind::ValueValidation
    ) {
        return None;
    }
    let Some(ContextValue::String(arg)) = error.get(ContextKind::InvalidArg) else {
        return None;
    };
    let flag = arg.split_whitespace().next()?.strip_prefix("--")?;
    from_file.iter().find(|setting| setting.key == flag)
}

/// The subcommand `args` invoke (the first argument naming one), else the root command.
fn invoked<'c>(root: &'c Command, args: &[OsString]) -> &'c Command {
    args.iter()
        .skip(1)
        .filter_map(|a| a.to_str())
        .find_map(|a| root.find_subcommand(a))
        .unwrap_or(root)
}

fn command_name(root: &Command, command: &Command) -> String {
    if std::ptr::eq(root, command) {
        root.get_name().to_owned()
    } else {
        format!("{} {}", root.get_name(), command.get_name())
    }
}

/// The value of `--long VALUE` or `--long=VALUE` in `args`, if given.
fn flag_value(args: &[OsString], long: &str) -> Option<OsString> {
    let mut args = args.iter().skip(1);
    while let Some(arg) = args.next() {
        match as_flag(&arg.to_string_lossy(), long) {
            Some(None) => return args.next().cloned(),
            Some(Some(value)) => return Some(value.into()),
            None => {}
        }
    }
    None
}

/// `Some(None)` when `text` is `--long`, `Some(Some(value))` when it is `--long=value`.
fn as_flag<'t>(text: &'t str, long: &str) -> Option<Option<&'t str>> {
    let rest = text.strip_prefix("--")?.strip_prefix(long)?;
    match rest.strip_prefix('=') {
        Some(value) => Some(Some(value)),
        None => rest.is_empty().then_some(None),
    }
}

/// Whether the command line or the environment sets `arg`.
fn given(arg: &Arg, args: &[OsString], env: &impl Fn(&str) -> Option<OsString>) -> bool {
    let in_env = arg
        .get_env()
        .and_then(|name| name.to_str())
        .is_some_and(|name| env(name).is_some());
    let mut names: Vec<&str> = arg.get_long().into_iter().collect();
    names.extend(arg.get_all_aliases().unwrap_or_default());
    let on_line = args.iter().skip(1).any(|a| {
        let a = a.to_string_lossy();
        names.iter().any(|name| as_flag(&a, name).is_some())
    });
    in_env || on_line
}

/// Each key of the file as its arg, where it is, and the flags that say the same.
fn settings<'c>(
    path: &Path,
    text: &str,
    command: &'c Command,
    name: &str,
) -> Result<Vec<(&'c Arg, Setting)>, ConfigFileError> {
    let line_of = |offset: usize| text[..offset.min(text.len())].matches('\n').count() + 1;
    let table = DeTable::parse(text).map_err(|e| ConfigFileError::Syntax {
        path: path.to_owned(),
        line: e.span().map_or(1, |span| line_of(span.start)),
        message: e.message().to_owned(),
    })?;
    let mut settings = Vec::new();
    for (key, value) in table.get_ref() {
        let line = line_of(key.span().start);
        let key = key.get_ref().as_ref();
        let arg = command
            .get_arguments()
            .find(|a| a.get_long() == Some(key) && key != FLAG && key != CHECK_FLAG)
            .ok_or_else(|| ConfigFileError::UnknownKey {
                path: path.to_owned(),
                line,
                key: key.to_owned(),
                command: name.to_owned(),
            })?;
        let bad = |message: String| ConfigFileError::BadValue {
            path: path.to_owned(),
            line,
            key: key.to_owned(),
            message,
        };
        let flags = flags(arg, value.get_ref()).map_err(bad)?;
        let setting = Setting {
            path: path.to_owned(),
            line,
            key: key.to_owned(),
            flags,
        };
        settings.push((arg, setting));
    }
    Ok(settings)
}

/// The flags that give `arg` the TOML `value`.
fn flags(arg: &Arg, value: &DeValue<'_>) -> Result<Vec<OsString>, String> {
    let long = arg.get_long().unwrap_or_default();
    if matches!(arg.get_action(), ArgAction::SetTrue | ArgAction::SetFalse) {
        return match value {
            DeValue::Boolean(true) => Ok(vec![format!("--{long}").into()]),
            DeValue::Boolean(false) => Ok(Vec::new()),
            _ => Err("takes true or false".to_owned()),
        };
    }
    let values: Vec<&DeValue<'_>> = match value {
        DeValue::Array(items) if matches!(arg.get_action(), ArgAction::Append) => {
            items.iter().map(|item| item.get_ref()).collect()
        }
        DeValue::Array(_) => return Err("takes one value, not a list".to_owned()),
        value => vec![value],
    };
    let mut flags = Vec::with_capacity(values.len());
    for value in values {
        let text = scalar(value)?;
        let mut flag = OsString::from(format!("--{long}="));
        flag.push(&text);
        flags.push(flag);
    }
    Ok(flags)
}

/// A string, number or boolean as the text its flag would be given.
fn scalar(value: &DeValue<'_>) -> Result<String, String> {
    match value {
        DeValue::String(text) => Ok(text.to_string()),
        DeValue::Integer(integer) => {
            let digits = integer.as_str().replace('_', "");
            i128::from_str_radix(&digits, integer.radix())
                .map(|n| n.to_string())
                .map_err(|e| format!("the integer {}: {e}", integer.as_str()))
        }
        DeValue::Float(float) => Ok(float.as_str().replace('_', "")),
        DeValue::Boolean(flag) => Ok(flag.to_string()),
        DeValue::Datetime(_) => Err("a date is not a setting's value".to_owned()),
        DeValue::Array(_) => Err("takes one value, not a list".to_owned()),
        DeValue::Table(_) => Err("takes a value, not a table".to_owned()),
    }
}

/// Clap's message without its `error: ` prefix and usage lines.
fn first_line(message: &str) -> String {
    let line = message.lines().next().unwrap_or_default();
    line.strip_prefix("error: ").unwrap_or(line).to_owned()
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::io::Write;
    use std::time::Duration;

    use clap::{Parser, Subcommand};

    use super::*;

    #[derive(Debug, Parser)]
    #[command(name = "floe-test")]
    struct Cli {
        #[command(subcommand)]
        command: Sub,
    }

    #[derive(Debug, Subcommand)]
    enum Sub {
        Serve(Serve),
        Other,
    }

    #[derive(Debug, clap::Args)]
    struct Serve {
        #[arg(long, env = "FLOE_CONFIG")]
        config: Option<PathBuf>,
        #[arg(long, env = "TEST_DATA_DIR")]
        data_dir: PathBuf,
        #[arg(long, default_value = "0.0.0.0:7100")]
        listen: std::net::SocketAddr,
        #[arg(long, value_parser = humantime::parse_duration, default_value = "1s")]
        wait: Duration,
        #[arg(long)]
        verbose: bool,
        #[arg(long)]
        peer: Vec<String>,
        #[arg(long)]
        check_config: bool,
    }

    fn file(text: &str) -> tempfile::NamedTempFile {
        let mut file = tempfile::NamedTempFile::new().expect("temp file");
        file.write_all(text.as_bytes()).expect("write");
        file
    }

    fn run(args: &[&str], env: &[(&str, &str)]) -> Result<Cli, Failure> {
        let env: HashMap<String, OsString> = env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).into()))
            .collect();
        let args = args.iter().map(OsString::from).collect();
        try_parse_from::<Cli>(args, |name| env.get(name).cloned())
    }

    fn serve_args(cli: Cli) -> Serve {
        match cli.command {
            Sub::Serve(serve) => serve,
            Sub::Other => panic!("not serve"),
        }
    }

    #[test]
    fn the_file_fills_what_flags_and_env_leave_unset() {
        let config = file(
            "data-dir = \"/from/file\"\nlisten = \"127.0.0.1:9000\"\nwait = \"250ms\"\n\
             verbose = true\npeer = [\"a:1\", \"b:2\"]\n",
        );
        let path = config.path().to_str().expect("utf-8");
        let cli = run(&["floe-test", "serve", "--config", path], &[]).expect("parsed");
        let serve = serve_args(cli);
        assert_eq!(serve.data_dir, PathBuf::from("/from/file"));
        assert_eq!(serve.listen.port(), 9000);
        assert_eq!(serve.wait, Duration::from_millis(250));
        assert!(serve.verbose);
        assert_eq!(serve.peer, ["a:1", "b:2"]);

        let cli = run(
            &["floe-test", "serve", "--listen=127.0.0.1:9100"],
            &[("FLOE_CONFIG", path)],
        )
        .expect("parsed");
        let serve = serve_args(cli);
        assert_eq!(serve.listen.port(), 9100, "the flag wins");
        assert_eq!(serve.wait, Duration::from_millis(250), "the file fills");

        // What the environment sets is left to it (clap reads the variable itself).
        let args = ["floe-test", "serve", "--config", path].map(OsString::from);
        let env = |name: &str| (name == "TEST_DATA_DIR").then(|| OsString::from("/from/env"));
        let (args, from_file) = with_file::<Cli>(args.into(), &env).expect("file");
        assert!(
            !args
                .iter()
                .any(|a| a.to_string_lossy().starts_with("--data-dir"))
        );
        assert!(from_file.iter().all(|setting| setting.key != "data-dir"));
        assert!(from_file.iter().any(|setting| setting.key == "wait"));
    }

    #[test]
    fn no_file_changes_nothing() {
        let args: Vec<OsString> = ["floe-test", "other"].map(OsString::from).into();
        let (same, from_file) = with_file::<Cli>(args.clone(), &|_| None).expect("no file");
        assert_eq!(same, args);
        assert!(from_file.is_empty());
    }

    #[test]
    fn an_unknown_key_names_the_file_line_and_command() {
        let config = file("data-dir = \"/x\"\n\nlisen = \"127.0.0.1:1\"\n");
        let path = config.path().to_str().expect("utf-8");
        let error = run(&["floe-test", "serve", "--config", path], &[]).expect_err("refused");
        let text = error.to_string();
        assert!(
            text.ends_with(
                ":3: `lisen` is not a setting of `floe-test serve` (see `floe-test serve --help`)"
            ),
            "{text}"
        );
        assert!(text.contains(path), "{text}");
    }

    #[test]
    fn checking_the_settings_is_an_action_of_the_command_line_not_a_setting() {
        let config = file("data-dir = \"/x\"\ncheck-config = true\n");
        let path = config.path().to_str().expect("utf-8");
        let error = run(&["floe-test", "serve", "--config", path], &[]).expect_err("refused");
        assert!(
            error
                .to_string()
                .ends_with(":2: `check-config` is not a setting of `floe-test serve` (see `floe-test serve --help`)"),
            "{error}"
        );
    }

    #[test]
    fn values_are_checked_by_the_flags_parsers() {
        for (text, line, why) in [
            (
                "data-dir = \"/x\"\nlisten = \"nowhere\"\n",
                2,
                "invalid socket address",
            ),
            ("data-dir = \"/x\"\nwait = \"ten\"\n", 2, "ten"),
            ("verbose = \"yes\"\n", 1, "takes true or false"),
            (
                "listen = [\"127.0.0.1:1\"]\n",
                1,
                "takes one value, not a list",
            ),
            ("[listen]\nport = 1\n", 1, "takes a value, not a table"),
        ] {
            let config = file(text);
            let path = config.path().to_str().expect("utf-8");
            let error = run(&["floe-test", "serve", "--config", path], &[]).expect_err(text);
            let shown = error.to_string();
            assert!(shown.contains(&format!("{path}:{line}: `")), "{shown}");
            assert!(shown.contains(why), "{text}: {shown}");
        }
    }

    #[test]
    fn bad_toml_and_a_missing_file_are_errors() {
        let config = file("data-dir = \"/x\"\nlisten = \n");
        let path = config.path().to_str().expect("utf-8");
        let error = run(&["floe-test", "serve", "--config", path], &[]).expect_err("syntax");
        assert!(
            error.to_string().contains(&format!("{path}:2: not TOML")),
            "{error}"
        );

        let error =
            run(&["floe-test", "serve", "--config=/no/such/file.toml"], &[]).expect_err("missing");
        assert!(
            matches!(error, Failure::File(ConfigFileError::Read { ref path, .. }) if path == Path::new("/no/such/file.toml")),
            "{error}"
        );
    }
}
