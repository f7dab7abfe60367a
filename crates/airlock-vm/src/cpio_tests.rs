use super::*;

/// One entry as read back: name, mode, rdev, data.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Read {
    pub name: String,
    pub mode: u32,
    pub rdev: (u32, u32),
    pub data: Vec<u8>,
}

fn field(header: &[u8], index: usize) -> u32 {
    let start = 6 + index * 8;
    u32::from_str_radix(std::str::from_utf8(&header[start..start + 8]).unwrap(), 16).unwrap()
}

/// A reader written from the format description, independent of the writer's code paths:
/// checks the magic and the 4-byte alignment of every name and data block.
pub(crate) fn read_all(bytes: &[u8]) -> Vec<Read> {
    let mut out = Vec::new();
    let mut at = 0usize;
    loop {
        assert_eq!(at % 4, 0, "every header starts 4-byte aligned");
        let header = &bytes[at..at + 110];
        assert_eq!(&header[..6], b"070701");
        let name_size = field(header, 11) as usize;
        let size = field(header, 6) as usize;
        let name_start = at + 110;
        let name = std::str::from_utf8(&bytes[name_start..name_start + name_size - 1])
            .unwrap()
            .to_owned();
        assert_eq!(bytes[name_start + name_size - 1], 0, "names end in NUL");
        let data_start = (name_start + name_size).div_ceil(4) * 4;
        let data = bytes[data_start..data_start + size].to_vec();
        at = (data_start + size).div_ceil(4) * 4;
        if name == "TRAILER!!!" {
            assert_eq!(at, bytes.len(), "nothing after the trailer");
            return out;
        }
        out.push(Read {
            name,
            mode: field(header, 1),
            rdev: (field(header, 9), field(header, 10)),
            data,
        });
    }
}

#[test]
fn archive_reads_back_with_modes_links_devices_and_data() {
    let mut w = CpioWriter::new(Vec::new());
    w.dir("dev", 0o755).unwrap();
    w.char_device("dev/console", 0o600, 5, 1).unwrap();
    w.dir("lib", 0o755).unwrap();
    // Sizes 0..=5 cover every padding remainder.
    for n in 0..=5u8 {
        let data = vec![n; n as usize];
        w.file(
            &format!("lib/f{n}"),
            0o644,
            data.len() as u64,
            &mut &data[..],
        )
        .unwrap();
    }
    w.symlink("lib64", "lib").unwrap();
    w.file("init", 0o755, 3, &mut &b"abc"[..]).unwrap();
    let bytes = w.finish().unwrap();
    let entries = read_all(&bytes);
    let names: Vec<&str> = entries.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "dev",
            "dev/console",
            "lib",
            "lib/f0",
            "lib/f1",
            "lib/f2",
            "lib/f3",
            "lib/f4",
            "lib/f5",
            "lib64",
            "init"
        ]
    );
    assert_eq!(entries[0].mode, 0o040_755);
    assert_eq!(entries[1].mode, 0o020_600);
    assert_eq!(entries[1].rdev, (5, 1));
    assert_eq!(entries[8].data, vec![5u8; 5]);
    assert_eq!(entries[9].mode, 0o120_777);
    assert_eq!(entries[9].data, b"lib");
    assert_eq!(entries[10].mode, 0o100_755);
    assert_eq!(entries[10].data, b"abc");
}

#[test]
fn same_entries_give_the_same_bytes() {
    let build = || {
        let mut w = CpioWriter::new(Vec::new());
        w.dir("a", 0o755).unwrap();
        w.file("a/b", 0o600, 2, &mut &b"hi"[..]).unwrap();
        w.finish().unwrap()
    };
    assert_eq!(build(), build());
}

#[test]
fn names_that_could_escape_or_confuse_the_unpacker_are_refused() {
    for name in [
        "",
        "/init",
        "a/../b",
        "./a",
        "a//b",
        "a/",
        "TRAILER!!!",
        "a\0b",
    ] {
        let mut w = CpioWriter::new(Vec::new());
        assert!(
            matches!(w.dir(name, 0o755), Err(CpioError::Name { .. })),
            "{name:?} accepted"
        );
    }
}

#[test]
fn a_source_shorter_than_announced_is_an_error_not_a_corrupt_archive() {
    let mut w = CpioWriter::new(Vec::new());
    let err = w.file("f", 0o644, 10, &mut &b"abc"[..]).unwrap_err();
    assert!(
        matches!(
            err,
            CpioError::ShortRead {
                expected: 10,
                read: 3,
                ..
            }
        ),
        "{err}"
    );
}
