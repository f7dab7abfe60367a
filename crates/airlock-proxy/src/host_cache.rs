//! A small per-host cache with a hard bound: what the proxy builds once per intercepted host
//! (its TLS server configuration) and reuses for that host only.
//!
//! Entries are keyed by the normalized host exactly (no wildcard, no address): a value built
//! for one host is never returned for another. At most `max` hosts are kept; inserting beyond
//! that forgets the oldest entry first, so a sandbox naming ever new hosts (a wildcard binding)
//! cannot grow it.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

/// See the module docs.
pub(crate) struct HostCache<V> {
    inner: Mutex<Entries<V>>,
    max: usize,
}

struct Entries<V> {
    map: HashMap<String, V>,
    /// Hosts in insertion order, oldest first.
    order: VecDeque<String>,
}

impl<V: Clone> HostCache<V> {
    /// An empty cache keeping at most `max` hosts (at least one).
    pub(crate) fn new(max: usize) -> HostCache<V> {
        HostCache {
            inner: Mutex::new(Entries {
                map: HashMap::new(),
                order: VecDeque::new(),
            }),
            max: max.max(1),
        }
    }

    /// The value for `host`, made by `make` (and kept) when there is none; an error is
    /// returned and nothing is kept.
    #[cfg(test)]
    pub(crate) fn get_or_try_insert<E>(
        &self,
        host: &str,
        make: impl FnOnce() -> Result<V, E>,
    ) -> Result<V, E> {
        self.get_or_try_insert_if(host, |_| true, make)
    }

    /// As [`Self::get_or_try_insert`], but a kept value for which `fresh` is false is made
    /// again (and replaces it); if making it fails, the stale value is forgotten too.
    pub(crate) fn get_or_try_insert_if<E>(
        &self,
        host: &str,
        fresh: impl FnOnce(&V) -> bool,
        make: impl FnOnce() -> Result<V, E>,
    ) -> Result<V, E> {
        let mut e = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        match e.map.get(host) {
            Some(v) if fresh(v) => return Ok(v.clone()),
            Some(_) => {
                e.map.remove(host);
                e.order.retain(|h| h != host);
            }
            None => {}
        }
        let v = make()?;
        while e.map.len() >= self.max {
            let Some(oldest) = e.order.pop_front() else {
                break;
            };
            e.map.remove(&oldest);
        }
        e.map.insert(host.to_owned(), v.clone());
        e.order.push_back(host.to_owned());
        Ok(v)
    }

    /// How many hosts are kept.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .map
            .len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;

    fn get(cache: &HostCache<String>, host: &str, made: &mut u32) -> String {
        cache
            .get_or_try_insert(host, || {
                *made += 1;
                Ok::<_, Infallible>(format!("built for {host}"))
            })
            .unwrap()
    }

    #[test]
    fn a_value_is_built_once_per_host_and_never_given_to_another_host() {
        let cache = HostCache::new(4);
        let mut made = 0;
        assert_eq!(get(&cache, "a.test", &mut made), "built for a.test");
        assert_eq!(get(&cache, "a.test", &mut made), "built for a.test");
        assert_eq!(made, 1, "built once for a.test");
        // Other hosts, however similar, get their own.
        for other in ["b.test", "A.test", "sub.a.test", "a.test.", "127.0.0.1"] {
            assert_eq!(get(&cache, other, &mut made), format!("built for {other}"));
        }
        assert_eq!(made, 6);
    }

    #[test]
    fn the_cache_is_bounded_and_forgets_the_oldest_host_first() {
        let cache = HostCache::new(3);
        let mut made = 0;
        for n in 0..10 {
            get(&cache, &format!("h{n}.test"), &mut made);
            assert!(cache.len() <= 3);
        }
        assert_eq!(cache.len(), 3);
        let before = made;
        get(&cache, "h9.test", &mut made);
        assert_eq!(made, before, "the newest is kept");
        get(&cache, "h0.test", &mut made);
        assert_eq!(made, before + 1, "the oldest was forgotten");
    }

    #[test]
    fn a_stale_value_is_made_again_and_replaces_the_old_one() {
        let cache: HostCache<u32> = HostCache::new(2);
        let ok = |v| move || Ok::<_, Infallible>(v);
        assert_eq!(cache.get_or_try_insert_if("a.test", |_| true, ok(1)), Ok(1));
        assert_eq!(
            cache.get_or_try_insert_if("a.test", |v| *v == 1, ok(2)),
            Ok(1)
        );
        assert_eq!(
            cache.get_or_try_insert_if("a.test", |v| *v != 1, ok(3)),
            Ok(3)
        );
        assert_eq!(
            cache.get_or_try_insert("a.test", ok(4)),
            Ok(3),
            "the new one is kept"
        );
        assert_eq!(cache.len(), 1, "replaced, not added");
        // A failed remake forgets the stale value.
        assert!(cache
            .get_or_try_insert_if("a.test", |_| false, || Err::<u32, _>("no"))
            .is_err());
        assert_eq!(cache.len(), 0);
        // A remade value counts as the newest: b, older, goes first when c comes.
        cache.get_or_try_insert("a.test", ok(8)).unwrap();
        cache.get_or_try_insert("b.test", ok(9)).unwrap();
        assert_eq!(
            cache.get_or_try_insert_if("a.test", |_| false, ok(10)),
            Ok(10)
        );
        cache.get_or_try_insert("c.test", ok(11)).unwrap();
        assert_eq!(
            cache.get_or_try_insert("a.test", ok(12)),
            Ok(10),
            "a was kept"
        );
        assert_eq!(
            cache.get_or_try_insert("b.test", ok(13)),
            Ok(13),
            "b was forgotten"
        );
    }

    #[test]
    fn a_failed_build_keeps_nothing() {
        let cache: HostCache<String> = HostCache::new(2);
        assert!(cache
            .get_or_try_insert("a.test", || Err::<String, _>("no"))
            .is_err());
        assert_eq!(cache.len(), 0);
    }
}
