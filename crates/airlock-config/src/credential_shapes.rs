//! Credential shapes: recognizes text that looks like a credential (A2).
//!
//! Configuration sync copies user-authored files (instructions, settings, commands) from the
//! host into a sandbox. People paste tokens into such files (`settings.json` with an `env`
//! block, an MCP server's header in a command file), and a sandbox must never receive a real
//! credential (N8). Every synced file goes through [`scan`]; a file with any match is not
//! copied, and the caller names the file, the line and the kind of credential — never the
//! matched text.
//!
//! The shapes are the documented, prefixed formats of the providers agents talk to (GitHub,
//! Anthropic, OpenAI, AWS, Google, Slack, GitLab, npm, Hugging Face, Stripe), PEM/OpenSSH
//! private keys, and JSON Web Tokens. Prefixed shapes keep false positives rare: a prose word
//! never starts with `ghp_` followed by 36 alphanumerics. The scan is lossy UTF-8, line by line,
//! linear in the input, and allocation-free per line.

use serde::Serialize;

/// A kind of credential [`scan`] recognizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Shape {
    /// `ghp_`, `gho_`, `ghu_`, `ghs_`, `ghr_` tokens and `github_pat_` fine-grained tokens.
    GitHubToken,
    /// `sk-ant-…` API and OAuth keys.
    AnthropicKey,
    /// `sk-proj-…`, `sk-svcacct-…`, `sk-admin-…` and legacy `sk-…` keys.
    OpenAiKey,
    /// `AKIA…`/`ASIA…` access key ids.
    AwsAccessKeyId,
    /// A 40-character value assigned to an `aws_secret_access_key`-like name.
    AwsSecretKey,
    /// `AIza…` API keys.
    GoogleApiKey,
    /// `ya29.…` OAuth access tokens and `GOCSPX-…` client secrets.
    GoogleOAuth,
    /// `xoxb-`, `xoxp-`, `xoxa-`, `xoxr-`, `xoxs-`, `xapp-` tokens.
    SlackToken,
    /// `https://hooks.slack.com/services/…` webhook URLs.
    SlackWebhook,
    /// `glpat-…` personal access tokens.
    GitLabToken,
    /// `npm_…` access tokens.
    NpmToken,
    /// `hf_…` access tokens.
    HuggingFaceToken,
    /// `sk_live_…`/`rk_live_…` secret keys.
    StripeKey,
    /// A PEM or OpenSSH private key block.
    PrivateKey,
    /// A JSON Web Token (`eyJ….eyJ….…`).
    Jwt,
}

impl Shape {
    /// Human name used in `up`'s output.
    pub fn describe(self) -> &'static str {
        match self {
            Shape::GitHubToken => "a GitHub token",
            Shape::AnthropicKey => "an Anthropic API key",
            Shape::OpenAiKey => "an OpenAI API key",
            Shape::AwsAccessKeyId => "an AWS access key id",
            Shape::AwsSecretKey => "an AWS secret access key",
            Shape::GoogleApiKey => "a Google API key",
            Shape::GoogleOAuth => "a Google OAuth token or client secret",
            Shape::SlackToken => "a Slack token",
            Shape::SlackWebhook => "a Slack webhook URL",
            Shape::GitLabToken => "a GitLab token",
            Shape::NpmToken => "an npm token",
            Shape::HuggingFaceToken => "a Hugging Face token",
            Shape::StripeKey => "a Stripe secret key",
            Shape::PrivateKey => "a private key",
            Shape::Jwt => "a JSON Web Token",
        }
    }
}

/// One match: the 1-based line and the kind. The matched text is deliberately not kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// 1-based line number.
    pub line: usize,
    /// What it looks like.
    pub shape: Shape,
}

/// A prefixed token: `prefix` then at least `min` characters of `alphabet`.
struct Prefixed {
    prefix: &'static str,
    min: usize,
    alphabet: Alphabet,
    shape: Shape,
}

#[derive(Clone, Copy)]
enum Alphabet {
    /// `[A-Za-z0-9]`
    Alnum,
    /// `[A-Za-z0-9_-]`
    Token,
    /// `[A-Z0-9]`
    Upper,
}

impl Alphabet {
    fn allows(self, b: u8) -> bool {
        match self {
            Alphabet::Alnum => b.is_ascii_alphanumeric(),
            Alphabet::Token => b.is_ascii_alphanumeric() || b == b'_' || b == b'-',
            Alphabet::Upper => b.is_ascii_uppercase() || b.is_ascii_digit(),
        }
    }
}

const fn p(prefix: &'static str, min: usize, alphabet: Alphabet, shape: Shape) -> Prefixed {
    Prefixed {
        prefix,
        min,
        alphabet,
        shape,
    }
}

/// Longer prefixes first where one prefix extends another (`sk-ant-` before `sk-`).
const PREFIXED: &[Prefixed] = &[
    p("ghp_", 36, Alphabet::Alnum, Shape::GitHubToken),
    p("gho_", 36, Alphabet::Alnum, Shape::GitHubToken),
    p("ghu_", 36, Alphabet::Alnum, Shape::GitHubToken),
    p("ghs_", 36, Alphabet::Alnum, Shape::GitHubToken),
    p("ghr_", 36, Alphabet::Alnum, Shape::GitHubToken),
    p("github_pat_", 22, Alphabet::Token, Shape::GitHubToken),
    p("sk-ant-", 20, Alphabet::Token, Shape::AnthropicKey),
    p("sk-proj-", 20, Alphabet::Token, Shape::OpenAiKey),
    p("sk-svcacct-", 20, Alphabet::Token, Shape::OpenAiKey),
    p("sk-admin-", 20, Alphabet::Token, Shape::OpenAiKey),
    p("sk-", 32, Alphabet::Token, Shape::OpenAiKey),
    p("AKIA", 16, Alphabet::Upper, Shape::AwsAccessKeyId),
    p("ASIA", 16, Alphabet::Upper, Shape::AwsAccessKeyId),
    p("AIza", 35, Alphabet::Token, Shape::GoogleApiKey),
    p("ya29.", 20, Alphabet::Token, Shape::GoogleOAuth),
    p("GOCSPX-", 20, Alphabet::Token, Shape::GoogleOAuth),
    p("xoxb-", 10, Alphabet::Token, Shape::SlackToken),
    p("xoxp-", 10, Alphabet::Token, Shape::SlackToken),
    p("xoxa-", 10, Alphabet::Token, Shape::SlackToken),
    p("xoxr-", 10, Alphabet::Token, Shape::SlackToken),
    p("xoxs-", 10, Alphabet::Token, Shape::SlackToken),
    p("xapp-", 10, Alphabet::Token, Shape::SlackToken),
    p(
        "hooks.slack.com/services/T",
        8,
        Alphabet::Token,
        Shape::SlackWebhook,
    ),
    p("glpat-", 20, Alphabet::Token, Shape::GitLabToken),
    p("npm_", 36, Alphabet::Alnum, Shape::NpmToken),
    p("hf_", 30, Alphabet::Alnum, Shape::HuggingFaceToken),
    p("sk_live_", 20, Alphabet::Alnum, Shape::StripeKey),
    p("rk_live_", 20, Alphabet::Alnum, Shape::StripeKey),
];

/// Every credential-shaped match in `bytes`, in line order (at most one per shape and line).
pub fn scan(bytes: &[u8]) -> Vec<Finding> {
    let mut out = Vec::new();
    for (i, line) in bytes.split(|b| *b == b'\n').enumerate() {
        let mut shapes: Vec<Shape> = Vec::new();
        scan_line(line, &mut |s| {
            if !shapes.contains(&s) {
                shapes.push(s);
            }
        });
        shapes.sort();
        out.extend(
            shapes
                .into_iter()
                .map(|shape| Finding { line: i + 1, shape }),
        );
    }
    out
}

/// The first match in `bytes`, if any.
pub fn first(bytes: &[u8]) -> Option<Finding> {
    scan(bytes).into_iter().next()
}

fn scan_line(line: &[u8], found: &mut dyn FnMut(Shape)) {
    for start in 0..line.len() {
        // A token starts at a boundary: a prefix inside a longer word (`task-…`) is not one.
        let boundary = start == 0 || !is_word(line[start - 1]);
        let rest = &line[start..];
        if boundary {
            if let Some(shape) = prefixed(rest) {
                found(shape);
            }
            if rest.starts_with(b"eyJ") && jwt(rest) {
                found(Shape::Jwt);
            }
        }
    }
    if private_key_header(line) {
        found(Shape::PrivateKey);
    }
    if aws_secret_assignment(line) {
        found(Shape::AwsSecretKey);
    }
}

fn is_word(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'-'
}

fn prefixed(rest: &[u8]) -> Option<Shape> {
    PREFIXED.iter().find_map(|t| {
        let tail = rest.strip_prefix(t.prefix.as_bytes())?;
        let n = tail.iter().take_while(|b| t.alphabet.allows(**b)).count();
        // AWS key ids have an exact length; a longer run is some other identifier.
        let exact = matches!(t.alphabet, Alphabet::Upper);
        let fits = if exact {
            n == t.min && tail.get(n).is_none_or(|b| !is_word(*b))
        } else {
            n >= t.min
        };
        fits.then_some(t.shape)
    })
}

/// `eyJ<b64url>.eyJ<b64url>.<b64url>`: a JWT's header and claims are JSON objects.
fn jwt(rest: &[u8]) -> bool {
    let b64 = |b: &u8| b.is_ascii_alphanumeric() || *b == b'_' || *b == b'-';
    let mut parts = rest.splitn(3, |b| *b == b'.');
    let (Some(header), Some(claims), Some(sig)) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    let sig_len = sig.iter().take_while(|b| b64(b)).count();
    header.starts_with(b"eyJ")
        && header.len() >= 10
        && header.iter().all(b64)
        && claims.starts_with(b"eyJ")
        && claims.len() >= 10
        && claims.iter().all(b64)
        && sig_len >= 16
}

fn private_key_header(line: &[u8]) -> bool {
    let Some(at) = find(line, b"-----BEGIN ") else {
        return false;
    };
    let after = &line[at..];
    find(after, b"PRIVATE KEY").is_some()
}

/// `aws_secret_access_key = <40 chars>` in any case, with `=`, `:` or quotes between.
fn aws_secret_assignment(line: &[u8]) -> bool {
    let lower = line.to_ascii_lowercase();
    let Some(at) = find(&lower, b"secret_access_key").or_else(|| find(&lower, b"secretaccesskey"))
    else {
        return false;
    };
    let after = &line[at..];
    let key_end = after
        .iter()
        .position(|b| !is_word(*b))
        .unwrap_or(after.len());
    let value = after[key_end..]
        .iter()
        .skip_while(|b| matches!(b, b' ' | b'\t' | b'=' | b':' | b'"' | b'\''))
        .take_while(|b| b.is_ascii_alphanumeric() || matches!(b, b'/' | b'+'))
        .count();
    value == 40
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fake credentials, assembled so that this file itself holds none.
    fn fakes() -> Vec<(String, Shape)> {
        let a = |n: usize| "a1B2".repeat(n / 4 + 1)[..n].to_owned();
        let up = |n: usize| "A1B2".repeat(n / 4 + 1)[..n].to_owned();
        vec![
            (format!("gh{}_{}", "p", a(36)), Shape::GitHubToken),
            (format!("gh{}_{}", "s", a(36)), Shape::GitHubToken),
            (format!("github_{}_{}", "pat", a(60)), Shape::GitHubToken),
            (format!("sk-{}-api03-{}", "ant", a(80)), Shape::AnthropicKey),
            (format!("sk-{}-{}", "proj", a(120)), Shape::OpenAiKey),
            (format!("sk-{}", a(48)), Shape::OpenAiKey),
            (format!("AK{}{}", "IA", up(16)), Shape::AwsAccessKeyId),
            (
                format!("aws_secret_access_key = {}", a(40)),
                Shape::AwsSecretKey,
            ),
            (format!("AI{}{}", "za", a(35)), Shape::GoogleApiKey),
            (format!("ya{}.{}", "29", a(60)), Shape::GoogleOAuth),
            (
                format!("xo{}-{}-{}", "xb", "1234567890", a(24)),
                Shape::SlackToken,
            ),
            (
                format!(
                    "https://hooks.{}.com/services/T{}/B{}",
                    "slack",
                    up(8),
                    a(24)
                ),
                Shape::SlackWebhook,
            ),
            (format!("gl{}-{}", "pat", a(20)), Shape::GitLabToken),
            (format!("np{}_{}", "m", a(36)), Shape::NpmToken),
            (format!("h{}_{}", "f", a(34)), Shape::HuggingFaceToken),
            (format!("sk_{}_{}", "live", a(24)), Shape::StripeKey),
            (
                format!("-----BEGIN {} PRIVATE KEY-----", "OPENSSH"),
                Shape::PrivateKey,
            ),
            (
                format!("-----BEGIN {}PRIVATE KEY-----", "RSA "),
                Shape::PrivateKey,
            ),
            (format!("eyJ{}.eyJ{}.{}", a(20), a(40), a(43)), Shape::Jwt),
        ]
    }

    #[test]
    fn every_documented_shape_is_found_with_its_line() {
        for (token, shape) in fakes() {
            for wrapped in [
                token.clone(),
                format!("\"env\": {{ \"KEY\": \"{token}\" }}"),
                format!("export X={token}"),
                format!("Authorization: Bearer {token},"),
            ] {
                let text = format!("# notes\n\n{wrapped}\nlast line\n");
                let found = scan(text.as_bytes());
                assert!(
                    found.contains(&Finding { line: 3, shape }),
                    "{shape:?} not found in {wrapped:?}: {found:?}"
                );
            }
        }
    }

    #[test]
    fn ordinary_configuration_is_not_a_credential() {
        let text = r#"{
  "model": "claude-sonnet-4-5",
  "permissions": { "allow": ["Bash(git status)", "Read(~/src/**)"] },
  "env": { "ANTHROPIC_API_KEY": "${ANTHROPIC_API_KEY}", "DISABLE_TELEMETRY": "1" },
  "statusLine": "task-master sk-learn ghp_short AKIA_NOT_A_KEY",
  "hooks": { "PostToolUse": [{ "command": "cargo fmt --all" }] },
  "url": "https://github.com/rust-lang/rust/blob/master/README.md"
}
# Use `ask-ant-forgetting-prefixes` and the risk-management-framework-for-everyone-here.
Keys are read from AKIAIOSFODNN7EXAMPLEEXTRA identifiers that are too long.
-----BEGIN CERTIFICATE-----
"#;
        assert_eq!(scan(text.as_bytes()), vec![]);
    }

    #[test]
    fn a_prefix_inside_a_longer_word_is_not_a_token() {
        let a = "a1B2".repeat(12);
        assert!(scan(format!("task-{a}").as_bytes()).is_empty());
        assert!(scan(format!("risk-{a}").as_bytes()).is_empty());
        assert_eq!(
            first(format!("x=sk-{a}").as_bytes()).unwrap().shape,
            Shape::OpenAiKey
        );
    }

    #[test]
    fn binary_and_invalid_utf8_are_scanned_without_panicking() {
        let mut bytes = vec![0xff, 0xfe, 0x00, b'\n'];
        bytes.extend_from_slice(format!("gh{}_{}", "p", "Z".repeat(36)).as_bytes());
        assert_eq!(
            scan(&bytes),
            vec![Finding {
                line: 2,
                shape: Shape::GitHubToken
            }]
        );
    }

    proptest::proptest! {
        #[test]
        fn scan_never_panics_on_arbitrary_bytes(bytes in proptest::collection::vec(0u8..=255, 0..512)) {
            let _ = scan(&bytes);
        }
    }
}
