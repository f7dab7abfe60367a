//! N2: host patterns, rule precedence and presets.

use airlock_config::policy::{normalize_host, Action, HostPattern, Policy, Rule, RuleOrigin};
use airlock_config::raw::Preset;
use proptest::prelude::*;

fn rule(action: Action, p: &str) -> Rule {
    Rule {
        action,
        pattern: HostPattern::parse(p).unwrap(),
        origin: RuleOrigin::User,
    }
}

fn allowed(policy: &Policy, host: &str, port: u16) -> bool {
    policy.decide(host, port).allowed
}

#[test]
fn pattern_matching_table() {
    // (pattern, host, port, allowed by an allow rule)
    let table: &[(&str, &str, u16, bool)] = &[
        ("example.com", "example.com", 443, true),
        ("example.com", "EXAMPLE.com.", 443, true),
        ("example.com", "www.example.com", 443, false),
        ("example.com", "example.com", 22, false),
        ("example.com", "example.com", 80, true),
        ("example.com:8443", "example.com", 8443, true),
        ("example.com:8443", "example.com", 443, false),
        ("*.example.com", "a.example.com", 443, true),
        ("*.example.com", "a.b.example.com", 443, false),
        ("*.example.com", "example.com", 443, false),
        ("*.example.com", "aexample.com", 443, false),
        ("**.example.com", "a.b.c.example.com", 443, true),
        ("**.example.com", "a.example.com", 80, true),
        ("**.example.com", "example.com", 443, false),
        ("**.example.com", "evil-example.com", 443, false),
        ("**.example.com", "example.com.evil.net", 443, false),
        ("10.1.2.3", "10.1.2.3", 443, true),
        ("10.1.2.3", "10.1.2.4", 443, false),
        ("[::1]:8080", "[::1]", 8080, true),
        ("::1", "0:0:0:0:0:0:0:1", 443, true),
        ("Example.COM", "example.com", 443, true),
    ];
    for (pattern, host, port, want) in table {
        let p = HostPattern::parse(pattern).unwrap();
        assert_eq!(
            p.allows(&normalize_host(host), *port),
            *want,
            "{pattern} vs {host}:{port}"
        );
    }
}

#[test]
fn invalid_patterns_are_rejected() {
    for bad in [
        "",
        "*.com",
        "**.com",
        "a.*.com",
        "*example.com",
        "foo..com",
        "-a.com",
        "a-.com",
        "a_b.com",
        "exa mple.com",
        "example.com:0",
        "example.com:65536",
        "example.com:http",
        "*.10.0.0.1",
        "127.1",
        "example.123",
        "https://example.com",
        "example.com/path",
        &format!("{}.com", "a".repeat(64)),
    ] {
        assert!(
            HostPattern::parse(bad).is_err(),
            "{bad:?} should be rejected"
        );
    }
}

#[test]
fn deny_beats_allow_whatever_the_order() {
    for rules in [
        vec![
            rule(Action::Allow, "**.example.com"),
            rule(Action::Deny, "x.example.com"),
        ],
        vec![
            rule(Action::Deny, "x.example.com"),
            rule(Action::Allow, "**.example.com"),
        ],
    ] {
        let p = Policy::new(Preset::None, rules);
        let d = p.decide("x.example.com", 443);
        assert!(!d.allowed);
        assert_eq!(d.rule.unwrap().action, Action::Deny);
        assert!(allowed(&p, "y.example.com", 443));
    }
}

#[test]
fn portless_deny_blocks_every_port_even_under_open() {
    let p = Policy::new(Preset::Open, vec![rule(Action::Deny, "evil.com")]);
    assert!(!allowed(&p, "evil.com", 8080));
    assert!(!allowed(&p, "evil.com", 443));
    assert!(allowed(&p, "good.com", 8080));
    assert!(p.decide("good.com", 8080).rule.is_none());
}

#[test]
fn empty_allowlist_denies_everything() {
    let p = Policy::new(Preset::None, Vec::new());
    for host in ["github.com", "localhost", "127.0.0.1", "api.anthropic.com"] {
        let d = p.decide(host, 443);
        assert!(!d.allowed, "{host}");
        assert!(d.rule.is_none());
        assert!(d.to_string().contains("no rule allows it"));
    }
}

#[test]
fn dev_preset_allows_code_hosts_registries_and_llm_apis_only() {
    let p = Policy::new(Preset::Dev, Vec::new());
    for host in [
        "github.com",
        "api.github.com",
        "objects.githubusercontent.com",
        "crates.io",
        "static.crates.io",
        "pypi.org",
        "files.pythonhosted.org",
        "registry.npmjs.org",
        "proxy.golang.org",
        "deb.debian.org",
        "static.rust-lang.org",
        "api.anthropic.com",
        "api.openai.com",
        "generativelanguage.googleapis.com",
    ] {
        let d = p.decide(host, 443);
        assert!(d.allowed, "{host}");
        assert_eq!(d.rule.unwrap().origin, RuleOrigin::Preset(Preset::Dev));
    }
    for host in [
        "example.com",
        "storage.googleapis.com",
        "github.com.evil.net",
        "169.254.169.254",
    ] {
        assert!(!allowed(&p, host, 443), "{host}");
    }
    assert!(!allowed(&p, "github.com", 22), "dev allows 80/443 only");
}

#[test]
fn decision_names_the_deciding_rule() {
    let p = Policy::new(Preset::Dev, vec![rule(Action::Deny, "github.com")]);
    let d = p.decide("github.com", 443);
    assert_eq!(
        d.to_string(),
        "denied by rule deny github.com (user config)"
    );
}

fn label() -> impl Strategy<Value = String> {
    "[a-z0-9]([a-z0-9-]{0,8}[a-z0-9])?"
}

/// A domain of 2-3 labels whose last label (the TLD) starts with a letter.
fn domain() -> impl Strategy<Value = String> {
    (prop::collection::vec(label(), 1..3), "[a-z][a-z0-9]{0,5}")
        .prop_map(|(l, tld)| format!("{}.{tld}", l.join(".")))
}

proptest! {
    #[test]
    fn display_round_trips(d in domain(), kind in 0..3usize, port in prop::option::of(1u16..)) {
        let mut text = [String::new(), "*.".to_owned(), "**.".to_owned()][kind].clone() + &d;
        if let Some(p) = port { text = format!("{text}:{p}"); }
        let p = HostPattern::parse(&text).unwrap();
        prop_assert_eq!(p.to_string(), text.clone());
        prop_assert_eq!(HostPattern::parse(&p.to_string()).unwrap(), p);
    }

    #[test]
    fn exact_pattern_matches_only_itself(d in domain(), other in domain(), extra in label()) {
        let p = HostPattern::parse(&d).unwrap();
        prop_assert!(p.allows(&d, 443));
        let longer = format!("{extra}.{d}");
        prop_assert!(!p.allows(&longer, 443));
        prop_assert_eq!(p.allows(&other, 443), other == d);
    }

    #[test]
    fn single_star_matches_exactly_one_extra_label(
        d in domain(), a in label(), b in label()
    ) {
        let p = HostPattern::parse(&format!("*.{d}")).unwrap();
        prop_assert!(!p.allows(&d, 443));
        let one = format!("{a}.{d}");
        let two = format!("{a}.{b}.{d}");
        prop_assert!(p.allows(&one, 443));
        prop_assert!(!p.allows(&two, 443));
    }

    #[test]
    fn double_star_matches_any_depth_but_not_the_bare_domain(
        d in domain(), labels in prop::collection::vec(label(), 1..5)
    ) {
        let p = HostPattern::parse(&format!("**.{d}")).unwrap();
        prop_assert!(!p.allows(&d, 443));
        let deep = format!("{}.{d}", labels.join("."));
        // A suffix that is not on a label boundary never matches.
        let glued = format!("{}{d}", labels.join("."));
        prop_assert!(p.allows(&deep, 443));
        prop_assert!(!p.allows(&glued, 443));
    }

    #[test]
    fn deny_always_beats_allow(d in domain(), port in 1u16.., preset in 0..3usize) {
        let preset = [Preset::None, Preset::Dev, Preset::Open][preset];
        let p = Policy::new(preset, vec![
            rule(Action::Allow, &d),
            rule(Action::Allow, &format!("{d}:{port}")),
            rule(Action::Deny, &d),
        ]);
        prop_assert!(!p.decide(&d, port).allowed);
    }

    #[test]
    fn parser_never_panics(s in ".{0,64}") {
        let _ = HostPattern::parse(&s);
    }
}

#[test]
fn check_targets_parse_with_default_port_443_and_refuse_wildcards() {
    use airlock_config::policy::parse_target;
    assert_eq!(
        parse_target("GitHub.com").unwrap(),
        ("github.com".into(), 443)
    );
    assert_eq!(
        parse_target("example.com:8080").unwrap(),
        ("example.com".into(), 8080)
    );
    assert_eq!(parse_target("[::1]:5432").unwrap(), ("::1".into(), 5432));
    assert!(parse_target("*.example.com").is_err());
    assert!(parse_target("example.com:0").is_err());
}

#[test]
fn denial_suggests_the_exact_allow_command() {
    use airlock_config::policy::allow_command;
    assert_eq!(
        allow_command("Example.com.", 443),
        "airlock policy allow example.com"
    );
    assert_eq!(
        allow_command("example.com", 8443),
        "airlock policy allow example.com:8443"
    );
    assert_eq!(
        allow_command("::1", 5432),
        "airlock policy allow [::1]:5432"
    );
    // What the command suggests really allows the request.
    let p = Policy::new(
        Preset::None,
        vec![rule(
            Action::Allow,
            allow_command("example.com", 8443)
                .rsplit(' ')
                .next()
                .unwrap(),
        )],
    );
    assert!(p.decide("example.com", 8443).allowed);
}
