//! The secret store on a real filesystem: modes, placeholders, listing, removal, N8.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use airlock_config::policy::HostPattern;
use airlock_secrets::{Redacted, SecretError, SecretInfo, SecretStore, PLACEHOLDER_PREFIX};

const VALUE: &str = "ghp_S3cretValueNeverShown0123456789";

fn hosts(list: &[&str]) -> Vec<HostPattern> {
    list.iter()
        .map(|h| HostPattern::parse(h).unwrap())
        .collect()
}

/// Stores `value` as secret `name` for `on`, which must succeed.
#[track_caller]
fn set(
    store: &SecretStore,
    name: &str,
    on: &[&str],
    header: Option<&str>,
    value: &str,
) -> SecretInfo {
    store
        .set(name, &hosts(on), header, Redacted::new(value.into()))
        .unwrap()
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

fn all_files_text(dir: &Path) -> Vec<(String, String)> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let p = e.unwrap().path();
            (
                p.display().to_string(),
                String::from_utf8_lossy(&std::fs::read(&p).unwrap()).into_owned(),
            )
        })
        .collect()
}

#[test]
fn store_directory_is_0700_and_records_and_salt_are_0600() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("data");
    let store = SecretStore::open(&root).unwrap();
    set(&store, "GITHUB_TOKEN", &["api.github.com"], None, VALUE);
    assert_eq!(mode(&root.join("secrets")), 0o700);
    assert_eq!(mode(&root.join("secrets/GITHUB_TOKEN.json")), 0o600);
    assert_eq!(mode(&root.join("secrets/installation-salt")), 0o600);
}

#[test]
fn placeholder_is_stable_across_reopen_and_value_changes_and_never_contains_the_value() {
    let tmp = tempfile::tempdir().unwrap();
    let store = SecretStore::open(tmp.path()).unwrap();
    let first = set(&store, "TOKEN", &["a.example.com"], None, VALUE).placeholder;
    assert!(first.starts_with(PLACEHOLDER_PREFIX));
    assert_eq!(first.len(), PLACEHOLDER_PREFIX.len() + 32);
    assert!(!first.contains(VALUE));
    let second = set(&store, "TOKEN", &["a.example.com"], None, "other").placeholder;
    assert_eq!(
        first, second,
        "the placeholder must not depend on the value"
    );
    let reopened = SecretStore::open(tmp.path()).unwrap();
    assert_eq!(reopened.list().unwrap()[0].placeholder, first);
}

#[test]
fn placeholders_differ_between_names_and_installations() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    let sa = SecretStore::open(a.path()).unwrap();
    let sb = SecretStore::open(b.path()).unwrap();
    let h = ["x.example.com"];
    let p1 = set(&sa, "ONE", &h, None, VALUE).placeholder;
    let p2 = set(&sa, "TWO", &h, None, VALUE).placeholder;
    let p3 = set(&sb, "ONE", &h, None, VALUE).placeholder;
    assert_ne!(p1, p2);
    assert_ne!(p1, p3, "placeholders must be salted per installation");
}

#[test]
fn list_shows_names_hosts_and_header_name_but_never_values() {
    let tmp = tempfile::tempdir().unwrap();
    let store = SecretStore::open(tmp.path()).unwrap();
    set(
        &store,
        "OPENAI_API_KEY",
        &["api.openai.com", "*.openai.com"],
        Some("Authorization: Bearer {value}"),
        VALUE,
    );
    set(&store, "A_FIRST", &["a.example.com"], None, "v2-secret");
    let list = store.list().unwrap();
    let names: Vec<_> = list.iter().map(|i| i.name.as_str()).collect();
    assert_eq!(names, ["A_FIRST", "OPENAI_API_KEY"]);
    assert_eq!(list[1].hosts, ["api.openai.com", "*.openai.com"]);
    assert_eq!(list[1].header.as_deref(), Some("Authorization"));
    let shown = format!("{list:?} {}", serde_json::to_string(&list).unwrap());
    assert!(
        !shown.contains(VALUE) && !shown.contains("v2-secret"),
        "{shown}"
    );
}

#[test]
fn bindings_carry_values_only_inside_redacted() {
    let tmp = tempfile::tempdir().unwrap();
    let store = SecretStore::open(tmp.path()).unwrap();
    set(
        &store,
        "TOKEN",
        &["api.github.com"],
        Some("Authorization: token {value}"),
        VALUE,
    );
    let table = store.bindings().unwrap();
    let b = table.bound_to("api.github.com", 443)[0];
    assert_eq!(b.value.expose(), VALUE);
    assert_eq!(
        b.header.as_ref().unwrap().render(b.value.expose()),
        format!("token {VALUE}")
    );
    assert!(!format!("{table:?} {store:?}").contains(VALUE));
    assert_eq!(
        table.environment(),
        [("TOKEN".to_owned(), b.placeholder.clone())]
    );
}

#[test]
fn remove_deletes_the_record_and_reports_unknown_names() {
    let tmp = tempfile::tempdir().unwrap();
    let store = SecretStore::open(tmp.path()).unwrap();
    set(&store, "TOKEN", &["a.example.com"], None, VALUE);
    store.remove("TOKEN").unwrap();
    assert!(store.list().unwrap().is_empty());
    assert!(matches!(
        store.remove("TOKEN"),
        Err(SecretError::NotFound { .. })
    ));
    assert!(matches!(store.remove("../etc"), Err(SecretError::Name(_))));
}

#[test]
fn set_refuses_bad_input_without_echoing_the_value() {
    let tmp = tempfile::tempdir().unwrap();
    let store = SecretStore::open(tmp.path()).unwrap();
    let h = hosts(&["a.example.com"]);
    let cases: Vec<(&str, &[HostPattern], Option<&str>, String)> = vec![
        ("lower", &h, None, VALUE.into()),
        ("TOKEN", &[], None, VALUE.into()),
        ("TOKEN", &h, Some("no colon {value}"), VALUE.into()),
        ("TOKEN", &h, None, String::new()),
        ("TOKEN", &h, None, format!("{VALUE}\r\nX-Injected: 1")),
    ];
    for (name, hs, header, value) in cases {
        let err = store
            .set(name, hs, header, Redacted::new(value))
            .unwrap_err();
        let text = format!("{err} {err:?}");
        assert!(!text.contains(VALUE), "{text}");
    }
    assert!(store.list().unwrap().is_empty());
}

#[test]
fn corrupt_record_error_does_not_quote_its_content() {
    let tmp = tempfile::tempdir().unwrap();
    let store = SecretStore::open(tmp.path()).unwrap();
    let path = store.dir().join("TOKEN.json");
    std::fs::write(&path, format!(r#"{{"version":1,"name":"TOKEN","hosts":["a.example.com"],"header":null,"value":7,"x":"{VALUE}"}}"#)).unwrap();
    let err = store.bindings().unwrap_err();
    assert!(matches!(err, SecretError::Corrupt { .. }));
    assert!(!format!("{err} {err:?}").contains(VALUE));
}

#[test]
fn the_value_is_only_in_its_own_record_file() {
    let tmp = tempfile::tempdir().unwrap();
    let store = SecretStore::open(tmp.path()).unwrap();
    set(&store, "TOKEN", &["a.example.com"], None, VALUE);
    for (path, text) in all_files_text(store.dir()) {
        assert_eq!(text.contains(VALUE), path.ends_with("TOKEN.json"), "{path}");
    }
}

#[test]
fn open_refuses_a_group_writable_store_directory() {
    let tmp = tempfile::tempdir().unwrap();
    SecretStore::open(tmp.path()).unwrap();
    std::fs::set_permissions(
        tmp.path().join("secrets"),
        std::fs::Permissions::from_mode(0o770),
    )
    .unwrap();
    assert!(matches!(
        SecretStore::open(tmp.path()),
        Err(SecretError::Dir(_))
    ));
}

#[test]
fn concurrent_first_opens_agree_on_one_salt() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_path_buf();
    let name = airlock_secrets::SecretName::parse("TOKEN").unwrap();
    let handles: Vec<_> = (0..8)
        .map(|_| {
            let root = root.clone();
            let name = name.clone();
            std::thread::spawn(move || SecretStore::open(&root).unwrap().placeholder(&name))
        })
        .collect();
    let all: Vec<String> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert!(all.iter().all(|p| *p == all[0]), "{all:?}");
    let leftovers: Vec<_> = std::fs::read_dir(root.join("secrets"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(leftovers, ["installation-salt"]);
}

#[test]
fn open_existing_creates_nothing_and_sees_what_open_stored() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("share/airlock");
    assert!(SecretStore::open_existing(&data).unwrap().is_none());
    assert!(!tmp.path().join("share").exists(), "created the data home");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o700)).unwrap();
    assert!(SecretStore::open_existing(&data).unwrap().is_none());
    assert!(!data.join("secrets").exists(), "created the store");
    let store = SecretStore::open(&data).unwrap();
    let stored = set(&store, "API_TOKEN", &["api.example.com"], None, VALUE);
    let seen = SecretStore::open_existing(&data).unwrap().expect("a store");
    assert_eq!(seen.list().unwrap(), vec![stored]);
}

#[test]
fn open_existing_refuses_a_store_others_can_write() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("airlock");
    SecretStore::open(&data).unwrap();
    std::fs::set_permissions(data.join("secrets"), std::fs::Permissions::from_mode(0o777)).unwrap();
    assert!(matches!(
        SecretStore::open_existing(&data),
        Err(SecretError::Dir(_))
    ));
}

#[test]
fn headers_a_secret_may_travel_in_are_stored_checked_and_listed() {
    let tmp = tempfile::tempdir().unwrap();
    let store = SecretStore::open(tmp.path()).unwrap();
    let on = hosts(&["api.example.com"]);
    let value = || Redacted::new(VALUE.to_owned());
    let bad = store.set_with_headers("TOKEN", &on, None, &["x-key\r\nX-Evil"], value());
    assert!(matches!(bad, Err(SecretError::Name(_))), "{bad:?}");
    assert!(
        store.list().unwrap().is_empty(),
        "nothing written on a refusal"
    );
    let template = Some("X-Token: {value}");
    let info = store
        .set_with_headers("TOKEN", &on, template, &["X-Api-Key", "x-api-key"], value())
        .unwrap();
    let expected = [
        "authorization",
        "proxy-authorization",
        "x-token",
        "x-api-key",
    ];
    assert_eq!(info.headers, expected);
    let reopened = SecretStore::open(tmp.path()).unwrap();
    assert_eq!(reopened.list().unwrap()[0].headers, expected);
    let b = reopened.bindings().unwrap();
    let b = b.iter().next().unwrap();
    assert!(b.may_carry("X-API-KEY") && b.may_carry("Authorization"));
    assert!(!b.may_carry("cookie") && !b.may_carry("x-echo"));
}

#[test]
fn the_catalogue_header_of_an_agent_key_is_a_carrier_and_old_records_still_load() {
    let tmp = tempfile::tempdir().unwrap();
    let store = SecretStore::open(tmp.path()).unwrap();
    // A record written before `headers` existed.
    let path = store.dir().join("ANTHROPIC_API_KEY.json");
    std::fs::write(&path, format!(r#"{{"version":1,"name":"ANTHROPIC_API_KEY","hosts":["api.anthropic.com"],"header":null,"value":"{VALUE}"}}"#)).unwrap();
    let listed = store.list().unwrap();
    assert_eq!(
        listed[0].headers,
        ["authorization", "proxy-authorization", "x-api-key"]
    );
}
