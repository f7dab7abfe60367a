//! Compare-and-swap semantics of the state store (R1): no update is ever lost.

use std::io::BufReader;
use std::os::unix::fs::PermissionsExt;

use airlock_core::{StateError, StateStore};
use proptest::prelude::*;

use crate::common::{spawn_worker, wait_for_line, KillOnDrop};

const WORKERS: u64 = 4;
const INCREMENTS: u64 = 50;

fn store() -> (tempfile::TempDir, StateStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = StateStore::open(dir.path().join("state")).unwrap();
    (dir, store)
}

#[test]
fn concurrent_processes_incrementing_through_cas_lose_no_update() {
    let dir = tempfile::tempdir().unwrap();
    let mut children: Vec<_> = (0..WORKERS)
        .map(|_| KillOnDrop(spawn_worker("increment", dir.path(), INCREMENTS)))
        .collect();
    let mut outs: Vec<_> = children
        .iter_mut()
        .map(|c| BufReader::new(c.0.stdout.take().unwrap()))
        .collect();
    for out in &mut outs {
        wait_for_line(out, "READY");
    }
    std::fs::write(dir.path().join("go"), b"").unwrap();
    let mut conflicts = 0u64;
    for out in &mut outs {
        let line = wait_for_line(out, "CONFLICTS ");
        conflicts += line["CONFLICTS ".len()..].parse::<u64>().unwrap();
    }
    for child in &mut children {
        assert!(child.0.wait().unwrap().success(), "a worker failed");
    }
    let store = StateStore::open(dir.path().join("store")).unwrap();
    let record = store.read::<u64>("counter.json").unwrap().unwrap();
    eprintln!("state_cas: {WORKERS} processes x {INCREMENTS} increments, {conflicts} CAS conflicts retried");
    assert_eq!(record.data, WORKERS * INCREMENTS, "updates were lost");
    assert_eq!(
        record.revision,
        WORKERS * INCREMENTS,
        "one revision per successful write"
    );
}

#[test]
fn concurrent_threads_updating_lose_no_update() {
    let (_dir, store) = store();
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for _ in 0..25 {
                    store
                        .update("n.json", |n: Option<u64>| n.unwrap_or(0) + 1)
                        .unwrap();
                }
            });
        }
    });
    assert_eq!(store.read::<u64>("n.json").unwrap().unwrap().data, 100);
}

#[test]
fn write_based_on_stale_revision_is_rejected_and_changes_nothing() {
    let (_dir, store) = store();
    assert_eq!(store.write("rec.json", None, &"first").unwrap(), 1);
    assert_eq!(store.write("rec.json", Some(1), &"second").unwrap(), 2);
    let err = store.write("rec.json", Some(1), &"lost?").unwrap_err();
    assert!(
        matches!(&err, StateError::StaleRevision { name, expected: Some(1), found: Some(2) } if name == "rec.json"),
        "{err:?}"
    );
    let record = store.read::<String>("rec.json").unwrap().unwrap();
    assert_eq!((record.revision, record.data.as_str()), (2, "second"));
}

#[test]
fn creating_a_record_that_already_exists_is_rejected() {
    let (_dir, store) = store();
    store.write("rec.json", None, &1u32).unwrap();
    let err = store.write("rec.json", None, &2u32).unwrap_err();
    assert!(matches!(
        err,
        StateError::StaleRevision {
            expected: None,
            found: Some(1),
            ..
        }
    ));
}

#[test]
fn revision_from_before_a_removal_cannot_overwrite_the_recreated_record() {
    let (_dir, store) = store();
    store.write("rec.json", None, &"a").unwrap();
    store.remove("rec.json", 1).unwrap();
    assert!(store.read::<String>("rec.json").unwrap().is_none());
    // Re-created by someone else: revisions continue, so the old revision 1 is stale.
    assert_eq!(store.write("rec.json", None, &"b").unwrap(), 2);
    let err = store.write("rec.json", Some(1), &"stale").unwrap_err();
    assert!(matches!(
        err,
        StateError::StaleRevision {
            expected: Some(1),
            found: Some(2),
            ..
        }
    ));
}

#[test]
fn remove_with_stale_revision_keeps_the_record() {
    let (_dir, store) = store();
    store.write("rec.json", None, &"a").unwrap();
    store.write("rec.json", Some(1), &"b").unwrap();
    assert!(matches!(
        store.remove("rec.json", 1).unwrap_err(),
        StateError::StaleRevision {
            expected: Some(1),
            found: Some(2),
            ..
        }
    ));
    assert!(store.read::<String>("rec.json").unwrap().is_some());
}

#[test]
fn record_names_that_could_escape_or_collide_are_rejected() {
    let (_dir, store) = store();
    let long = "a".repeat(129);
    for bad in [
        "",
        "../x",
        "a/b",
        "/abs",
        "A.json",
        ".hidden",
        "x..y",
        "-rf",
        "a\nb",
        "é",
        long.as_str(),
    ] {
        let err = store.write(bad, None, &0u8).unwrap_err();
        assert!(
            matches!(&err, StateError::InvalidName { name, .. } if name == bad),
            "{bad:?}: {err:?}"
        );
        assert!(matches!(
            store.read::<u8>(bad),
            Err(StateError::InvalidName { .. })
        ));
    }
    assert!(
        !store.root().exists(),
        "a rejected name must not create the store"
    );
}

proptest! {
    #[test]
    fn accepted_record_names_stay_one_plain_file_inside_the_store(name in "[a-z0-9._/-]{1,20}") {
        let store = StateStore::open("/state").unwrap();
        if let Ok(path) = store.path_of(&name) {
            prop_assert_eq!(path.parent(), Some(std::path::Path::new("/state")));
            prop_assert!(!name.starts_with('.'));
            prop_assert!(!name.contains(".."));
        }
    }
}

#[test]
fn reading_a_missing_store_creates_nothing() {
    let (dir, store) = store();
    assert!(store.read::<u8>("rec.json").unwrap().is_none());
    assert!(store.names().unwrap().is_empty());
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn records_are_private_files_in_a_private_directory() {
    let (_dir, store) = store();
    store.write("rec.json", None, &"secret-ish").unwrap();
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(store.root()), 0o700);
    assert_eq!(mode(&store.path_of("rec.json").unwrap()), 0o600);
    let on_disk: serde_json::Value =
        serde_json::from_slice(&std::fs::read(store.path_of("rec.json").unwrap()).unwrap())
            .unwrap();
    assert_eq!(
        on_disk,
        serde_json::json!({"revision": 1, "data": "secret-ish"})
    );
}

#[test]
fn corrupt_record_is_reported_with_its_path() {
    let (_dir, store) = store();
    store.write("rec.json", None, &1u8).unwrap();
    let path = store.path_of("rec.json").unwrap();
    std::fs::write(&path, b"{\"revision\": 1, \"da").unwrap();
    let err = store.read::<u8>("rec.json").unwrap_err();
    assert!(
        matches!(&err, StateError::Corrupt { path: p, .. } if p == &path),
        "{err:?}"
    );
    assert!(matches!(
        store.write("rec.json", Some(1), &2u8),
        Err(StateError::Corrupt { .. })
    ));
}

#[test]
fn record_replaced_by_a_symlink_is_not_followed() {
    let (dir, store) = store();
    store.write("rec.json", None, &1u8).unwrap();
    let elsewhere = dir.path().join("planted.json");
    std::fs::write(&elsewhere, br#"{"revision": 7, "data": 99}"#).unwrap();
    let path = store.path_of("rec.json").unwrap();
    std::fs::remove_file(&path).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &path).unwrap();
    assert!(matches!(
        store.read::<u8>("rec.json"),
        Err(StateError::Read { .. })
    ));
}

#[test]
fn names_lists_records_but_not_sidecars_or_substores() {
    let (_dir, store) = store();
    store.write("b.json", None, &1u8).unwrap();
    store.write("a.json", None, &1u8).unwrap();
    store.remove("b.json", 1).unwrap();
    let sub = store.substore("sandbox-1").unwrap();
    sub.write("operation.json", None, &1u8).unwrap();
    assert_eq!(store.names().unwrap(), vec!["a.json".to_string()]);
    assert_eq!(sub.names().unwrap(), vec!["operation.json".to_string()]);
}

#[test]
fn update_passes_current_data_and_returns_the_new_record() {
    let (_dir, store) = store();
    let first = store.update("list.json", |v: Option<Vec<u8>>| {
        assert!(v.is_none());
        vec![1]
    });
    assert_eq!(first.unwrap().revision, 1);
    let second = store
        .update("list.json", |v: Option<Vec<u8>>| {
            let mut v = v.unwrap();
            v.push(2);
            v
        })
        .unwrap();
    assert_eq!((second.revision, second.data), (2, vec![1, 2]));
}

#[test]
fn update_if_declining_writes_nothing_not_even_the_store() {
    let (_dir, store) = store();
    let none = store.update_if("n.json", |_: Option<u64>| None).unwrap();
    assert!(none.is_none());
    assert!(!store.root().exists(), "declining created the store");
    store.write("n.json", None, &7u64).unwrap();
    let kept = store
        .update_if("n.json", |n: Option<u64>| n.filter(|n| *n != 7))
        .unwrap();
    assert!(kept.is_none());
    let current = store.read::<u64>("n.json").unwrap().unwrap();
    assert_eq!((current.revision, current.data), (1, 7));
    let bumped = store
        .update_if("n.json", |n: Option<u64>| n.map(|n| n + 1))
        .unwrap()
        .unwrap();
    assert_eq!((bumped.revision, bumped.data), (2, 8));
}

#[test]
fn removing_an_absent_record_is_stale_and_creates_nothing() {
    let (dir, store) = store();
    assert!(matches!(
        store.remove("rec.json", 1),
        Err(StateError::StaleRevision {
            expected: Some(1),
            found: None,
            ..
        })
    ));
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn a_fifo_planted_as_a_record_is_refused_instead_of_blocking_the_reader() {
    let (_dir, store) = store();
    store.write("rec.json", None, &1u8).unwrap();
    let path = store.path_of("rec.json").unwrap();
    std::fs::remove_file(&path).unwrap();
    let status = std::process::Command::new("mkfifo")
        .arg(&path)
        .status()
        .unwrap();
    assert!(status.success());
    assert!(matches!(
        store.read::<u8>("rec.json"),
        Err(StateError::Read { .. })
    ));
}

#[test]
fn temporaries_of_a_killed_tombstone_write_are_cleaned_by_the_next_write() {
    let (_dir, store) = store();
    store.write("rec.json", None, &1u8).unwrap();
    let stray = store.root().join("..rec.json.removed.tmp.1.2");
    std::fs::write(&stray, b"{").unwrap();
    store.write("rec.json", Some(1), &2u8).unwrap();
    assert!(!stray.exists());
}

#[derive(Debug, Clone)]
enum Op {
    /// Write based on the revision just read (what a well-behaved caller does).
    WriteCurrent(u8),
    /// Write based on an arbitrary, possibly stale, expectation.
    WriteGuess(Option<u64>, u8),
    RemoveCurrent,
    RemoveGuess(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        any::<u8>().prop_map(Op::WriteCurrent),
        (proptest::option::of(0u64..6), any::<u8>()).prop_map(|(e, d)| Op::WriteGuess(e, d)),
        Just(Op::RemoveCurrent),
        (0u64..6).prop_map(Op::RemoveGuess),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Against a model: a write or removal succeeds exactly when its expectation matches the
    /// record on disk; revisions only grow, also across removals; a failed call changes nothing.
    #[test]
    fn store_follows_the_compare_and_swap_model(ops in proptest::collection::vec(op(), 1..12)) {
        let (_dir, store) = store();
        let mut current: Option<(u64, u8)> = None;
        let mut last_removed = 0u64;
        for op in ops {
            let cur_rev = current.map(|(r, _)| r);
            match op {
                Op::WriteCurrent(d) | Op::WriteGuess(_, d) => {
                    let expected = match op { Op::WriteGuess(e, _) => e, _ => cur_rev };
                    let got = store.write("m.json", expected, &d);
                    if expected == cur_rev {
                        let rev = cur_rev.unwrap_or(last_removed) + 1;
                        prop_assert_eq!(got.unwrap(), rev);
                        current = Some((rev, d));
                    } else {
                        let is_stale = matches!(got, Err(StateError::StaleRevision { .. }));
                        prop_assert!(is_stale);
                    }
                }
                Op::RemoveCurrent | Op::RemoveGuess(_) => {
                    let expected = match op { Op::RemoveGuess(e) => e, _ => cur_rev.unwrap_or(0) };
                    let got = store.remove("m.json", expected);
                    if cur_rev == Some(expected) {
                        prop_assert!(got.is_ok());
                        last_removed = expected;
                        current = None;
                    } else {
                        let is_stale = matches!(got, Err(StateError::StaleRevision { .. }));
                        prop_assert!(is_stale);
                    }
                }
            }
            let on_disk = store.read::<u8>("m.json").unwrap().map(|r| (r.revision, r.data));
            prop_assert_eq!(on_disk, current);
        }
    }
}
