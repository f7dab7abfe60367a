//! The heads of the proxy's answers: an accepted CONNECT is the bare status line, every other
//! answer carries a `Date` (the proxy's own, or one it appends to a forwarded response).

use airlock_config::policy::Action;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::common::*;

const NAME: &str = "plain.test.example";

/// An upstream that answers every connection with a response carrying no `Date`.
async fn upstream_without_date() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = s
                    .write_all(
                        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
                    )
                    .await;
            });
        }
    });
    port
}

async fn world(port: u16) -> World {
    let setup = Setup {
        policy: policy(vec![rule(Action::Allow, &format!("{NAME}:{port}"))]),
        hosts: vec![(NAME, "127.0.0.1")],
        trust_test_ca: false,
        audit_rotation: Default::default(),
    };
    World::start(setup, TestCa::new()).await
}

#[tokio::test]
async fn an_accepted_connect_is_answered_with_the_bare_status_line() {
    let port = upstream_without_date().await;
    let w = world(port).await;
    let (answer, stream) = connect(w.addr, &format!("{NAME}:{port}")).await;
    assert_eq!(answer.status, 200);
    assert!(answer.headers.is_empty(), "{:?}", answer.headers);
    assert!(stream.is_some());
}

#[tokio::test]
async fn refusals_and_forwarded_responses_without_a_date_get_one() {
    let port = upstream_without_date().await;
    let w = world(port).await;
    let (denied, _) = connect(w.addr, &format!("{NAME}:{}", port ^ 1)).await;
    assert_eq!(denied.status, 403);
    assert!(denied.headers.contains_key("date"), "{:?}", denied.headers);
    let forwarded = http_via(w.addr, &format!("http://{NAME}:{port}/x"), &[], "").await;
    assert_eq!((forwarded.status, forwarded.body.as_str()), (200, "ok"));
    assert!(
        forwarded.headers.contains_key("date"),
        "{:?}",
        forwarded.headers
    );
}
