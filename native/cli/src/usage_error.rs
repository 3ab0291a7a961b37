//! A wrong command line said in one line: clap's message without its usage block, with the
//! option or command it suggests, followed by where the help is.
//!
//! Invariant: the message is one line starting with what is wrong (the caller prefixes
//! `cachalot: error: `); the help pointer names the command when there is one, so
//! `cachalot replay --capcity 1GiB` points at `cachalot replay --help`.

use clap::error::{ContextKind, ContextValue, Error, ErrorKind};

/// The one-line message for `e`, a failed parse of `argv` (without the program name).
pub fn message(e: &Error, argv: &[String]) -> String {
    let rendered = e.render().to_string();
    let first = rendered.lines().next().unwrap_or("").trim();
    let mut line = first.strip_prefix("error: ").unwrap_or(first).to_string();
    let suggested = [ContextKind::SuggestedArg, ContextKind::SuggestedSubcommand, ContextKind::SuggestedValue]
        .into_iter()
        .find_map(|kind| match e.get(kind) {
            Some(ContextValue::String(s)) => Some(s.clone()),
            Some(ContextValue::Strings(v)) => v.first().cloned(),
            _ => None,
        });
    if let Some(s) = suggested {
        line.push_str(&format!("; did you mean '{s}'?"));
    } else if e.kind() == ErrorKind::UnknownArgument {
        if let Some(ContextValue::String(arg)) = e.get(ContextKind::InvalidArg) {
            if !arg.starts_with("--") && arg.starts_with('-') {
                line.push_str(&format!(" (a trace whose name starts with '-' can be given as ./{arg})"));
            }
        }
    }
    format!("{line}\nsee '{} --help'", command_of(argv))
}

/// `cachalot` and the command's name when the first argument is one of the commands.
fn command_of(argv: &[String]) -> String {
    match argv.first().map(String::as_str) {
        Some(c @ ("replay" | "compare" | "advise")) => format!("cachalot {c}"),
        _ => "cachalot".into(),
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::super::command_line::CommandLine;
    use super::*;

    fn error_for(args: &[&str]) -> String {
        let argv: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let e = CommandLine::try_parse_from(std::iter::once("cachalot".to_string()).chain(argv.clone())).unwrap_err();
        message(&e, &argv)
    }

    #[test]
    fn a_typo_gets_the_option_it_meant_in_two_lines() {
        let m = error_for(&["replay", "--capcity", "1GiB"]);
        assert_eq!(m.lines().count(), 2, "{m}");
        assert!(m.contains("'--capcity'") && m.contains("did you mean '--capacity'?"), "{m}");
        assert!(m.ends_with("see 'cachalot replay --help'"), "{m}");
        let m = error_for(&["replya"]);
        assert!(m.contains("did you mean 'replay'?"), "{m}");
        assert!(m.ends_with("see 'cachalot --help'"), "{m}");
    }

    #[test]
    fn a_bad_value_names_the_option_and_the_reason() {
        let m = error_for(&["replay", "--capacity", "lots"]);
        assert!(m.contains("--capacity") && m.contains("'lots' is not a size"), "{m}");
        let m = error_for(&["compare", "--passes", "1"]);
        assert!(m.contains("--passes") && m.contains("3..=1000"), "{m}");
    }
}
