//! Archives built in the tests: plain rootfs tars, `docker save` archives and OCI layouts,
//! including hostile entries the `tar` crate's builder would refuse to write.

use std::io::Write;

use sha2::{Digest, Sha256};

/// One entry of a layer or rootfs tar.
#[derive(Clone)]
pub enum E {
    Dir(&'static str, u32),
    File(&'static str, &'static [u8], u32),
    Owned(&'static str, &'static [u8], u32, u64, u64),
    Link(&'static str, &'static str),
    Hard(&'static str, &'static str),
    Dev(&'static str),
    /// A raw name (absolute, `..`) written as it is.
    RawFile(&'static [u8], &'static [u8]),
    /// A file whose owner is only in a preceding pax extended header (`uid`, `gid`), as tar
    /// writes ids that do not fit the header's octal field; the header itself says root.
    PaxOwned(&'static str, u64, u64),
}

pub fn tar(entries: &[E]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for e in entries {
        let mut h = tar::Header::new_gnu();
        h.set_mtime(1_700_000_000);
        h.set_uid(0);
        h.set_gid(0);
        let (name, data): (&[u8], &[u8]) = match e {
            E::Dir(n, mode) => {
                h.set_entry_type(tar::EntryType::Directory);
                h.set_mode(*mode);
                (n.as_bytes(), b"")
            }
            E::File(n, d, mode) => {
                h.set_entry_type(tar::EntryType::Regular);
                h.set_mode(*mode);
                (n.as_bytes(), *d)
            }
            E::Owned(n, d, mode, uid, gid) => {
                h.set_entry_type(tar::EntryType::Regular);
                h.set_mode(*mode);
                h.set_uid(*uid);
                h.set_gid(*gid);
                (n.as_bytes(), *d)
            }
            E::Link(n, target) | E::Hard(n, target) => {
                let kind = if matches!(e, E::Link(..)) {
                    tar::EntryType::Symlink
                } else {
                    tar::EntryType::Link
                };
                h.set_entry_type(kind);
                h.set_mode(0o777);
                raw_field(&mut h, 157, 100, target.as_bytes());
                (n.as_bytes(), b"")
            }
            E::Dev(n) => {
                h.set_entry_type(tar::EntryType::Char);
                h.set_mode(0o666);
                h.set_device_major(1).unwrap();
                h.set_device_minor(3).unwrap();
                (n.as_bytes(), b"")
            }
            E::RawFile(n, d) => {
                h.set_entry_type(tar::EntryType::Regular);
                h.set_mode(0o644);
                (*n, *d)
            }
            E::PaxOwned(n, uid, gid) => {
                let (uid, gid) = (uid.to_string(), gid.to_string());
                b.append_pax_extensions([("uid", uid.as_bytes()), ("gid", gid.as_bytes())])
                    .unwrap();
                h.set_entry_type(tar::EntryType::Regular);
                h.set_mode(0o644);
                (n.as_bytes(), b"pax")
            }
        };
        raw_field(&mut h, 0, 100, name);
        h.set_size(data.len() as u64);
        h.set_cksum();
        b.append(&h, data).unwrap();
    }
    b.into_inner().unwrap()
}

fn raw_field(h: &mut tar::Header, at: usize, len: usize, value: &[u8]) {
    assert!(value.len() < len);
    let bytes = h.as_mut_bytes();
    bytes[at..at + len].fill(0);
    bytes[at..at + value.len()].copy_from_slice(value);
}

pub fn sha(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

pub fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(bytes).unwrap();
    gz.finish().unwrap()
}

/// An outer archive of named regular files.
pub fn outer(members: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (name, data) in members {
        let mut h = tar::Header::new_gnu();
        h.set_mode(0o644);
        h.set_size(data.len() as u64);
        h.set_path(name).unwrap();
        h.set_cksum();
        b.append(&h, data.as_slice()).unwrap();
    }
    b.into_inner().unwrap()
}

fn config(diff_ids: &[String]) -> Vec<u8> {
    let ids: Vec<String> = diff_ids.iter().map(|d| format!("\"sha256:{d}\"")).collect();
    format!(
        r#"{{"architecture":"amd64","os":"linux","config":{{}},"rootfs":{{"type":"layers","diff_ids":[{}]}}}}"#,
        ids.join(",")
    )
    .into_bytes()
}

/// A `docker save` archive (legacy layout: `<id>/layer.tar`, `<config hex>.json`).
pub fn docker_save(layers: &[Vec<u8>]) -> Vec<u8> {
    let diff: Vec<String> = layers.iter().map(|l| sha(l)).collect();
    let cfg = config(&diff);
    let cfg_name = format!("{}.json", sha(&cfg));
    let mut members = vec![(cfg_name.clone(), cfg)];
    let mut names = Vec::new();
    for (i, l) in layers.iter().enumerate() {
        let n = format!("{i:064x}/layer.tar");
        names.push(format!("\"{n}\""));
        members.push((n, l.clone()));
    }
    let manifest = format!(
        r#"[{{"Config":"{cfg_name}","RepoTags":["t:latest"],"Layers":[{}]}}]"#,
        names.join(",")
    );
    members.push(("manifest.json".into(), manifest.into_bytes()));
    outer(&members)
}

/// An OCI image layout with gzip-compressed layers; returns the archive and the manifest digest.
pub fn oci_layout(layers: &[Vec<u8>]) -> (Vec<u8>, String) {
    oci_layout_with(layers, |_| {})
}

/// Like [`oci_layout`], letting the caller tamper with the blobs before they are archived.
pub fn oci_layout_with(
    layers: &[Vec<u8>],
    tamper: impl Fn(&mut Vec<(String, Vec<u8>)>),
) -> (Vec<u8>, String) {
    let diff: Vec<String> = layers.iter().map(|l| sha(l)).collect();
    let cfg = config(&diff);
    let mut members = vec![(format!("blobs/sha256/{}", sha(&cfg)), cfg.clone())];
    let mut descs = Vec::new();
    for l in layers {
        let gz = gzip(l);
        descs.push(format!(
            r#"{{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":"sha256:{}","size":{}}}"#,
            sha(&gz),
            gz.len()
        ));
        members.push((format!("blobs/sha256/{}", sha(&gz)), gz));
    }
    let manifest = format!(
        r#"{{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:{}","size":{}}},"layers":[{}]}}"#,
        sha(&cfg),
        cfg.len(),
        descs.join(",")
    )
    .into_bytes();
    let mdigest = sha(&manifest);
    let index = format!(
        r#"{{"schemaVersion":2,"manifests":[{{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:{mdigest}","size":{}}}]}}"#,
        manifest.len()
    );
    members.push((format!("blobs/sha256/{mdigest}"), manifest));
    members.push((
        "oci-layout".into(),
        br#"{"imageLayoutVersion":"1.0.0"}"#.to_vec(),
    ));
    members.push(("index.json".into(), index.into_bytes()));
    tamper(&mut members);
    (outer(&members), format!("sha256:{mdigest}"))
}
