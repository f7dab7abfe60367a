//! Checked secret names and header templates.
//!
//! - A [`SecretName`] is the environment variable that holds the placeholder inside the sandbox:
//!   `[A-Z_][A-Z0-9_]*`, at most 128 characters. It is also the record's file name, so the
//!   charset doubles as a guarantee that a name never escapes the store directory.
//! - A header name a secret may be carried in ([`parse_header_name`]) is an RFC 9110 token,
//!   kept lowercase.
//! - A [`HeaderTemplate`] is `Name: text {value} text`: an RFC 9110 token as the name, exactly
//!   one `{value}`, and only visible ASCII and spaces around it. CR, LF and NUL are refused, so a
//!   template can never inject a second header line (RFC 9112 §2.2).

use std::fmt;

/// Why a name or template was refused. Never contains a secret value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    /// The secret name is outside `[A-Z_][A-Z0-9_]*` or longer than 128 characters.
    #[error("invalid secret name {name:?}: use an environment variable name (A-Z, 0-9 and _, not starting with a digit, at most 128 characters)")]
    InvalidName {
        /// The refused name.
        name: String,
    },
    /// The header template is malformed.
    #[error("invalid header template {template:?}: {reason} (expected `Name: text {{value}} text`, e.g. `Authorization: Bearer {{value}}`)")]
    InvalidTemplate {
        /// The refused template.
        template: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A header name a secret may be carried in is not an HTTP token.
    #[error("invalid header name {name:?}: use an HTTP header name such as `x-api-key`")]
    InvalidHeaderName {
        /// The refused name.
        name: String,
    },
}

/// Checks a header name (an RFC 9110 token, at most 128 bytes) and returns it lowercased.
pub fn parse_header_name(name: &str) -> Result<String, NameError> {
    if name.is_empty() || name.len() > 128 || !name.bytes().all(is_token_byte) {
        return Err(NameError::InvalidHeaderName {
            name: name.to_owned(),
        });
    }
    Ok(name.to_ascii_lowercase())
}

/// A checked secret name (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SecretName(String);

impl SecretName {
    /// Checks `name`.
    pub fn parse(name: &str) -> Result<SecretName, NameError> {
        let b = name.as_bytes();
        let ok = !b.is_empty()
            && b.len() <= 128
            && (b[0].is_ascii_uppercase() || b[0] == b'_')
            && b.iter()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == b'_');
        if ok {
            Ok(SecretName(name.to_owned()))
        } else {
            Err(NameError::InvalidName {
                name: name.to_owned(),
            })
        }
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SecretName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The marker a template's value goes into.
const VALUE_MARKER: &str = "{value}";

/// A checked header template, e.g. `Authorization: Bearer {value}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderTemplate {
    name: String,
    prefix: String,
    suffix: String,
}

impl HeaderTemplate {
    /// Checks `template` (see the module docs).
    pub fn parse(template: &str) -> Result<HeaderTemplate, NameError> {
        let bad = |reason| NameError::InvalidTemplate {
            template: template.to_owned(),
            reason,
        };
        let (name, text) = template
            .split_once(':')
            .ok_or_else(|| bad("no `:` after the header name"))?;
        if name.is_empty() || !name.bytes().all(is_token_byte) {
            return Err(bad("the header name must be a non-empty HTTP token"));
        }
        let text = text.trim();
        if !text.bytes().all(|b| b == b' ' || b.is_ascii_graphic()) {
            return Err(bad(
                "only visible ASCII and spaces are allowed in the value text",
            ));
        }
        let (prefix, suffix) = text
            .split_once(VALUE_MARKER)
            .ok_or_else(|| bad("it must contain {value} exactly once"))?;
        if suffix.contains(VALUE_MARKER) {
            return Err(bad("it must contain {value} exactly once"));
        }
        Ok(HeaderTemplate {
            name: name.to_owned(),
            prefix: prefix.to_owned(),
            suffix: suffix.to_owned(),
        })
    }

    /// The header name, as written.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The header value with `value` in place of `{value}`. Callers must not log the result.
    pub fn render(&self, value: &str) -> String {
        format!("{}{value}{}", self.prefix, self.suffix)
    }
}

impl fmt::Display for HeaderTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {}{VALUE_MARKER}{}",
            self.name, self.prefix, self.suffix
        )
    }
}

/// RFC 9110 §5.6.2 `tchar`.
fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_names_use_the_environment_variable_charset() {
        for ok in ["GITHUB_TOKEN", "_X", "A1", "OPENAI_API_KEY"] {
            assert!(SecretName::parse(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "1A",
            "github_token",
            "A-B",
            "A.B",
            "../X",
            "A B",
            &"A".repeat(129),
        ] {
            assert!(SecretName::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn template_renders_the_value_between_its_text() {
        let t = HeaderTemplate::parse("Authorization: Bearer {value}").unwrap();
        assert_eq!(t.name(), "Authorization");
        assert_eq!(t.render("abc"), "Bearer abc");
        assert_eq!(t.to_string(), "Authorization: Bearer {value}");
        let t = HeaderTemplate::parse("X-Key:{value};v=1").unwrap();
        assert_eq!(t.render("k"), "k;v=1");
    }

    #[test]
    fn template_refuses_header_injection_and_malformed_shapes() {
        for bad in [
            "Authorization Bearer {value}",
            "Authorization: Bearer",
            "Authorization: {value} {value}",
            "Bad Name: {value}",
            ": {value}",
            "X: {value}\r\nX-Injected: 1",
            "X: a\n{value}",
            "X: \u{0}{value}",
        ] {
            assert!(HeaderTemplate::parse(bad).is_err(), "{bad:?}");
        }
    }
}
