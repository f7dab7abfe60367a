use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixListener;
use std::time::Duration;

use airlock_protocol::ExitStatus;

use super::{boot_with, exec, guest_user};

/// A stand-in for the sandbox's proxy: answers one request and reports its request line.
fn stub_proxy(listener: UnixListener) -> std::sync::mpsc::Receiver<String> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let Ok((conn, _)) = listener.accept() else {
            return;
        };
        let mut reader = BufReader::new(conn.try_clone().unwrap());
        let mut first = String::new();
        reader.read_line(&mut first).unwrap();
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap() == 0 || line == "\r\n" {
                break;
            }
        }
        let mut conn = conn;
        conn.write_all(
            b"HTTP/1.1 200 OK\r\nContent-Length: 14\r\nConnection: close\r\n\r\nfrom the proxy",
        )
        .unwrap();
        let _ = tx.send(first.trim_end().to_owned());
    });
    rx
}

#[test]
fn vm_egress_reaches_the_host_proxy_through_the_channel_and_there_is_no_network_device() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("proxy.sock");
    let requests = stub_proxy(UnixListener::bind(&socket).unwrap());
    let Some(vm) = boot_with(&[], guest_user(1000, 1000), Some(socket), Vec::new()) else {
        return;
    };
    let (status, out, err) = exec(
        &vm,
        &[
            "curl",
            "-sS",
            "--max-time",
            "60",
            "-x",
            "http://127.0.0.1:3128",
            "http://upstream.test/hello",
        ],
        None,
    );
    assert_eq!(status, ExitStatus::Code(0), "stderr: {err}");
    assert_eq!(out, "from the proxy");
    let request = requests.recv_timeout(Duration::from_secs(30)).unwrap();
    assert_eq!(request, "GET http://upstream.test/hello HTTP/1.1");
    // The only way out is the relay: the guest has a loopback interface and nothing else.
    let (_, interfaces, _) = exec(&vm, &["ls", "/sys/class/net"], None);
    assert_eq!(interfaces.split_whitespace().collect::<Vec<_>>(), ["lo"]);
    assert!(
        !vm.machine.shutdown(Duration::from_secs(20)),
        "QEMU had to be killed"
    );
}
