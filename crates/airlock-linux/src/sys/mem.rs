//! Giving back the pages of the airlock binary that a long-lived, idle process mapped while
//! it started (the keeper, the init stage, the guest's PID 1).
//!
//! Each of these processes execs the whole airlock binary and touches, while it starts, code
//! it will not run again while idle (argument parsing, the sandbox's construction, TLS and
//! JSON setup). Those pages stay mapped, and a mapped page counts in the process's PSS for as
//! long as it lives (they are shared with other airlock processes, but for one sandbox they
//! are most of its memory). [`release_exe_pages`] drops this process's mappings of the
//! binary's *clean* pages with `MADV_DONTNEED`: they stay in the page cache (shared, and
//! reclaimable under memory pressure now that no idle process pins them) and are mapped again,
//! from that cache, on their next use.
//!
//! Only read-only mappings of the executable none of whose pages the process wrote are
//! released: for such a private file mapping `MADV_DONTNEED` maps the identical page-cache
//! bytes again, so nothing the process computed is lost (a mapping with a copy-on-write page,
//! which `smaps` counts as anonymous, e.g. relocated read-only data, is left alone).
//!
//! The same idle moment also hands malloc's free memory back ([`release_free_heap`]): each
//! thread that served a request (an exec stream, a client of the keeper) leaves an arena whose
//! freed pages stay resident, anonymous memory the idle process no longer uses.

use std::io::Read;
use std::path::PathBuf;

/// How long a long-lived process waits without work before it releases its start-up pages.
pub const IDLE_AFTER: std::time::Duration = std::time::Duration::from_secs(2);

/// One mapping of `/proc/self/smaps`, as much as the decision needs.
struct Mapping {
    start: usize,
    end: usize,
    eligible: bool,
    anon_kb: u64,
}

/// Releases the unwritten, read-only mappings of this process's executable; returns the bytes
/// advised. Errors (no `/proc`, an unreadable `smaps`) release nothing.
pub fn release_exe_pages() -> usize {
    OwnMappings::open().map_or(0, |m| m.release())
}

/// This process's `smaps` and executable path, opened while `/proc/self` names this process:
/// a process whose mount namespace later gets another `/proc` (the init stage, once PID 1 has
/// pivoted into the sandbox's root) releases through it.
pub struct OwnMappings {
    smaps: std::fs::File,
    exe: PathBuf,
}

impl OwnMappings {
    pub fn open() -> Option<OwnMappings> {
        Some(OwnMappings {
            exe: std::fs::read_link("/proc/self/exe").ok()?,
            smaps: std::fs::File::open("/proc/self/smaps").ok()?,
        })
    }

    /// See [`release_exe_pages`]; also [`release_free_heap`].
    pub fn release(&self) -> usize {
        release_free_heap();
        use std::io::Seek;
        let mut text = String::new();
        let mut smaps = &self.smaps;
        if smaps
            .seek(std::io::SeekFrom::Start(0))
            .and_then(|_| smaps.read_to_string(&mut text))
            .is_err()
        {
            return 0;
        }
        mappings(&text, &self.exe)
            .into_iter()
            .filter(|m| m.eligible && m.anon_kb == 0)
            .map(|m| {
                let len = m.end - m.start;
                // SAFETY: the range is one whole mapping of this process, read-only and
                // backed by the executable with no anonymous (copy-on-write) page (checked
                // above): dropping its page-table entries makes the next access re-map the
                // same file bytes. No reference into it is invalidated (the contents stay).
                let rc = unsafe {
                    libc::madvise(m.start as *mut libc::c_void, len, libc::MADV_DONTNEED)
                };
                if rc == 0 {
                    len
                } else {
                    0
                }
            })
            .sum()
    }
}

/// Returns the free memory of every malloc arena to the kernel (`malloc_trim(0)`: the top of
/// each heap is shrunk and whole free pages inside it are advised `MADV_DONTNEED`); what is
/// still allocated is untouched.
pub fn release_free_heap() {
    #[cfg(target_env = "gnu")]
    // SAFETY: `malloc_trim` has no preconditions; it takes each arena's lock itself, so other
    // threads may allocate meanwhile, and it only gives back memory that is free.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Parses `smaps` text: every mapping, eligible when it is a read-only (`r-xp` or `r--p`)
/// mapping of `exe`.
fn mappings(text: &str, exe: &std::path::Path) -> Vec<Mapping> {
    let mut out: Vec<Mapping> = Vec::new();
    for line in text.lines() {
        let mut fields = line.split_whitespace();
        let first = fields.next().unwrap_or("");
        if let Some((start, end)) = first.split_once('-').and_then(|(a, b)| {
            Some((
                usize::from_str_radix(a, 16).ok()?,
                usize::from_str_radix(b, 16).ok()?,
            ))
        }) {
            let perms = fields.next().unwrap_or("");
            let path: PathBuf = fields.nth(3).map(PathBuf::from).unwrap_or_default();
            out.push(Mapping {
                start,
                end,
                eligible: matches!(perms, "r-xp" | "r--p") && path == exe,
                anon_kb: 0,
            });
        } else if let (Some(m), Some(key)) = (out.last_mut(), first.strip_suffix(':')) {
            // A private mapping's page the process wrote (copy-on-write) is anonymous, or in
            // swap. (`Private_Dirty` also counts page-cache pages of a file written recently,
            // which re-mapping finds again: not a reason to keep them.)
            if matches!(key, "Anonymous" | "Swap") {
                let kb: u64 = fields.next().and_then(|v| v.parse().ok()).unwrap_or(1);
                m.anon_kb += kb;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMAPS: &str = "\
55d0c0000000-55d0c0100000 r--p 00000000 08:01 42 /opt/airlock
Rss:                 400 kB
Private_Dirty:         0 kB
Anonymous:             0 kB
55d0c0100000-55d0c0500000 r-xp 00100000 08:01 42 /opt/airlock
Private_Dirty:        64 kB
Anonymous:             0 kB
55d0c0500000-55d0c0600000 r--p 00500000 08:01 42 /opt/airlock
Private_Dirty:        12 kB
Anonymous:            12 kB
55d0c0600000-55d0c0608000 r--p 00600000 08:01 42 /opt/airlock
Private_Dirty:         0 kB
Anonymous:             0 kB
Swap:                  4 kB
55d0c0608000-55d0c0610000 rw-p 00608000 08:01 42 /opt/airlock
Private_Dirty:         0 kB
7f00c0000000-7f00c0100000 r-xp 00000000 08:01 7 /usr/lib/libc.so.6
Private_Dirty:         0 kB
";

    #[test]
    fn only_clean_read_only_mappings_of_the_executable_are_released() {
        let all = mappings(SMAPS, std::path::Path::new("/opt/airlock"));
        let released: Vec<(usize, usize)> = all
            .iter()
            .filter(|m| m.eligible && m.anon_kb == 0)
            .map(|m| (m.start, m.end))
            .collect();
        // Code whose page-cache pages are dirty (a binary just copied) is released; relocated
        // (copy-on-write) read-only data, swapped pages, writable data and libc stay mapped.
        assert_eq!(
            released,
            [
                (0x55d0c0000000, 0x55d0c0100000),
                (0x55d0c0100000, 0x55d0c0500000)
            ]
        );
    }

    #[test]
    fn released_code_still_runs_and_reads_the_same_bytes() {
        fn probe(x: u64) -> u64 {
            x.wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(17)
        }
        static TABLE: [u8; 4] = [1, 2, 3, 4];
        let before = (probe(7), TABLE);
        assert!(
            release_exe_pages() > 0,
            "nothing of the test binary was released"
        );
        assert_eq!((probe(7), TABLE), before);
    }
}
