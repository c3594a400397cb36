//! `containerInterface` templates.
//!
//! The syntax: a literal interface name, optionally holding one `{n}` placeholder.
//!
//! - `eth0` — exactly that name; attaching fails if the container already has it (or an
//!   earlier network of the same attach rendered it).
//! - `eth{n}` — the smallest `n` (0, 1, 2, …) whose name is free, e.g. `eth1` when the
//!   container has `eth0` or an earlier network took it.
//! - `{{` and `}}` stand for literal braces; any other `{…}` is a syntax error.
//!
//! A rendered name follows the kernel's rules: 1 to 15 bytes, no `/`, `:` or whitespace,
//! not `.` or `..`. Syntax and length are checked when the configuration is loaded, so a
//! template that can never be satisfied stops everything before anything starts.

use std::collections::HashSet;

/// The kernel's limit (`IFNAMSIZ` minus the terminating NUL).
pub const MAX_IFNAME_LEN: usize = 15;
/// Highest `{n}` tried; a container with this many interfaces of one pattern is broken.
const MAX_N: u32 = 9999;

/// A parsed `containerInterface` template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterfaceTemplate {
    source: String,
    prefix: String,
    /// `None` for a literal name; `Some(suffix)` when the name is `prefix{n}suffix`.
    suffix: Option<String>,
}

impl InterfaceTemplate {
    /// Parses and checks `source`; the error says what is wrong with it.
    pub fn parse(source: &str) -> Result<InterfaceTemplate, TemplateError> {
        let mut prefix = String::new();
        let mut suffix: Option<String> = None;
        let mut chars = source.chars().peekable();
        while let Some(c) = chars.next() {
            let out = suffix.as_mut().unwrap_or(&mut prefix);
            match c {
                '{' if chars.peek() == Some(&'{') => {
                    chars.next();
                    out.push('{');
                }
                '}' if chars.peek() == Some(&'}') => {
                    chars.next();
                    out.push('}');
                }
                '{' => {
                    let placeholder: String = chars.by_ref().take_while(|&c| c != '}').collect();
                    if placeholder != "n" {
                        return Err(TemplateError::UnknownPlaceholder {
                            template: source.to_string(),
                            placeholder,
                        });
                    }
                    if suffix.is_some() {
                        return Err(TemplateError::RepeatedPlaceholder { template: source.to_string() });
                    }
                    suffix = Some(String::new());
                }
                '}' => return Err(TemplateError::UnmatchedBrace { template: source.to_string() }),
                c => out.push(c),
            }
        }
        let template = InterfaceTemplate { source: source.to_string(), prefix, suffix };
        // The shortest rendering (n = 0) must already be a valid name.
        check_name(&template.render(0))
            .map_err(|why| TemplateError::BadName { template: source.to_string(), why })?;
        Ok(template)
    }

    /// The template as written in the configuration.
    pub fn source(&self) -> &str {
        &self.source
    }

    fn render(&self, n: u32) -> String {
        match &self.suffix {
            None => self.prefix.clone(),
            Some(suffix) => format!("{}{n}{suffix}", self.prefix),
        }
    }

    /// The name for a container whose interfaces (plus names earlier networks took) are
    /// `taken`; the error says why no name fits.
    pub fn pick(&self, taken: &HashSet<String>) -> Result<String, TemplateError> {
        if self.suffix.is_none() {
            let name = self.render(0);
            if taken.contains(&name) {
                return Err(TemplateError::Collides { template: self.source.clone() });
            }
            return Ok(name);
        }
        for n in 0..=MAX_N {
            let name = self.render(n);
            if check_name(&name).is_err() {
                break;
            }
            if !taken.contains(&name) {
                return Ok(name);
            }
        }
        Err(TemplateError::Exhausted { template: self.source.clone() })
    }
}

/// Checks a rendered interface name against the kernel's rules.
fn check_name(name: &str) -> Result<(), NameError> {
    if name.is_empty() {
        return Err(NameError::Empty);
    }
    if name.len() > MAX_IFNAME_LEN {
        return Err(NameError::TooLong { name: name.to_string() });
    }
    if name == "." || name == ".." || name.chars().any(|c| c == '/' || c == ':' || c.is_whitespace()) {
        return Err(NameError::Invalid { name: name.to_string() });
    }
    Ok(())
}

/// Why a `containerInterface` template is refused, or names no interface.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    #[error("template {template:?}: unknown placeholder {{{placeholder}}} (only {{n}} exists)")]
    UnknownPlaceholder { template: String, placeholder: String },
    #[error("template {template:?}: {{n}} may appear only once")]
    RepeatedPlaceholder { template: String },
    #[error("template {template:?}: unmatched '}}' (write '}}}}' for a brace)")]
    UnmatchedBrace { template: String },
    /// Even its shortest rendering is not an interface name.
    #[error("template {template:?}: {why}")]
    BadName { template: String, why: NameError },
    /// A literal name the container (or an earlier network) already has.
    #[error(
        "containerInterface {template:?} collides with an interface the container already has (or an \
         earlier network's); use a template such as \"eth{{n}}\""
    )]
    Collides { template: String },
    #[error("containerInterface {template:?}: every name it can render is taken or too long")]
    Exhausted { template: String },
}

/// Why a rendered name is not an interface name the kernel takes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("renders an empty interface name")]
    Empty,
    #[error("renders {name:?}, longer than {MAX_IFNAME_LEN} bytes")]
    TooLong { name: String },
    #[error("renders {name:?}, not a valid interface name")]
    Invalid { name: String },
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taken(names: &[&str]) -> HashSet<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn literal_names_render_as_written_unless_taken() {
        let t = InterfaceTemplate::parse("eth0").unwrap();
        assert_eq!(t.pick(&taken(&["lo"])).unwrap(), "eth0");
        let err = t.pick(&taken(&["lo", "eth0"])).unwrap_err();
        assert_eq!(err, TemplateError::Collides { template: "eth0".into() });
        assert!(err.to_string().contains("collides"), "{err}");
    }

    #[test]
    fn placeholder_takes_the_first_free_number() {
        let t = InterfaceTemplate::parse("eth{n}").unwrap();
        assert_eq!(t.pick(&taken(&["lo"])).unwrap(), "eth0");
        assert_eq!(t.pick(&taken(&["eth0", "eth2"])).unwrap(), "eth1");
        let t = InterfaceTemplate::parse("k{n}x").unwrap();
        assert_eq!(t.pick(&taken(&["k0x"])).unwrap(), "k1x");
    }

    #[test]
    fn braces_escape() {
        let t = InterfaceTemplate::parse("a{{b}}").unwrap();
        assert_eq!(t.pick(&taken(&[])).unwrap(), "a{b}");
    }

    #[test]
    fn syntax_and_length_errors_are_found_at_parse_time() {
        for (bad, why) in [
            ("eth{x}", "unknown placeholder"),
            ("e{n}{n}", "only once"),
            ("eth}", "unmatched"),
            ("", "empty"),
            ("averyverylongname", "longer than 15"),
            ("averyverylongx{n}x", "longer than 15"),
            ("a/b", "not a valid"),
        ] {
            let err = InterfaceTemplate::parse(bad).unwrap_err().to_string();
            assert!(err.contains(why), "{bad}: {err}");
        }
    }

    #[test]
    fn placeholder_stops_when_names_grow_too_long() {
        let t = InterfaceTemplate::parse("abcdefghijklmn{n}").unwrap(); // 15 bytes while n < 10
        let all: HashSet<String> = (0..10).map(|n| format!("abcdefghijklmn{n}")).collect();
        let err = t.pick(&all).unwrap_err();
        assert!(matches!(err, TemplateError::Exhausted { .. }), "{err}");
        assert!(err.to_string().contains("taken or too long"), "{err}");
    }
}
