//! N7: a flood of denied requests cannot fill the host's disk through the audit log. The log is
//! rotated by size with a bounded number of files, and identical denials in a row are one
//! counted line whose count is exact.

use airlock_proxy::{read_entries, Rotation};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;

use crate::common::*;

const MAX_BYTES: u64 = 8 * 1024;
const KEEP: usize = 2;

/// Sends `GET http://{host}/` for every host in `hosts` on one keep-alive connection; every
/// answer must be the 403 denial.
async fn denied_loop(w: &World, hosts: impl Iterator<Item = String>) {
    let tcp = tokio::net::TcpStream::connect(w.addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .unwrap();
    tokio::spawn(conn);
    for host in hosts {
        sender.ready().await.unwrap();
        let req = hyper::Request::get(format!("http://{host}/"))
            .header("host", &host)
            .body(Full::new(Bytes::new()))
            .unwrap();
        let resp = sender.send_request(req).await.unwrap();
        assert_eq!(resp.status(), 403);
        resp.into_body().collect().await.unwrap();
    }
}

#[tokio::test]
async fn a_loop_of_denied_requests_keeps_the_audit_log_bounded_and_counts_exactly() {
    let setup = Setup {
        policy: policy(vec![]),
        hosts: vec![],
        trust_test_ca: false,
        audit_rotation: Rotation {
            max_bytes: MAX_BYTES,
            keep: KEEP,
        },
    };
    let w = World::start(setup, TestCa::new()).await;
    // Varied denials: only rotation bounds these.
    denied_loop(&w, (0..400).map(|i| format!("h{i}.denied.example"))).await;
    // The same denial again and again: one counted line.
    denied_loop(&w, (0..1000).map(|_| "evil.example".to_owned())).await;
    let audit_path = w.audit_path.clone();
    let log_files = || {
        let dir = audit_path.parent().unwrap();
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap())
            .filter(|e| e.file_name().to_string_lossy().starts_with("audit.jsonl"))
            .map(|e| (e.file_name(), e.metadata().unwrap().len()))
            .collect::<Vec<_>>()
    };
    let files = log_files();
    assert!(files.len() <= KEEP + 1, "{files:?}");
    let one_line = 400; // bytes, generous
    for (name, len) in &files {
        assert!(*len <= MAX_BYTES, "{name:?}: {len} bytes");
    }
    let total: u64 = files.iter().map(|(_, l)| l).sum();
    assert!(total <= (KEEP as u64 + 1) * MAX_BYTES + one_line, "{total}");
    // Counted repeats are written at shutdown at the latest.
    let World { proxy, tmp, .. } = w;
    proxy.shutdown().await;
    let entries = read_entries(&audit_path).unwrap();
    drop(tmp);
    let evil: Vec<_> = entries
        .iter()
        .filter(|e| e.host == "evil.example")
        .collect();
    assert_eq!(
        evil.iter().map(|e| e.count()).sum::<u64>(),
        1000,
        "{evil:#?}"
    );
    assert!(
        evil.len() < 20,
        "{} lines for one repeated denial",
        evil.len()
    );
    assert!(evil.iter().all(|e| e.status == 403));
}
