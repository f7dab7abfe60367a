//! `[[ports]]`: user config only, strict, every bad entry reported at once.

use airlock_config::ports::{PublishedPort, MAX_PORTS};

use crate::common::{find, World};

#[test]
fn user_config_ports_reach_the_effective_config_in_file_order() {
    let w = World::new();
    w.write_user("[[ports]]\nhost = 8080\nguest = 3000\n[[ports]]\nhost = 9000\nguest = 3000\n");
    let e = w.ok(None);
    assert_eq!(
        e.ports,
        [
            PublishedPort {
                host: 8080,
                guest: 3000
            },
            PublishedPort {
                host: 9000,
                guest: 3000
            }
        ]
    );
}

#[test]
fn project_config_cannot_publish_host_ports() {
    let w = World::new();
    let p = w.project("p", Some("[[ports]]\nhost = 8080\nguest = 3000\n"));
    let diags = w.errors(Some(&p));
    let d = find(&diags, "ports");
    assert!(d.message.contains("user config"), "{d}");
}

#[test]
fn bad_port_entries_are_reported_together_with_their_lines() {
    let w = World::new();
    let diags = w.user_errors(
        "[[ports]]\nhost = 0\nguest = 3000\n\
         [[ports]]\nhost = 8080\nguest = 70000\n\
         [[ports]]\nhost = 8081\nguest = 1\nbind = \"0.0.0.0\"\n\
         [[ports]]\nhost = 8082\nguest = 1\n\
         [[ports]]\nhost = 8082\nguest = 2\n\
         [[ports]]\nguest = 2\n",
    );
    assert!(find(&diags, "ports[0].host").message.contains("port 0"));
    assert!(find(&diags, "ports[1].guest").line > 0);
    assert!(find(&diags, "ports[2].bind").line > 0);
    let dup = find(&diags, "ports[4].host");
    assert!(
        dup.message.contains("8082") && dup.message.contains("twice"),
        "{dup}"
    );
    assert_eq!(dup.line, 15, "the line of the second `host = 8082`");
    assert!(find(&diags, "ports[5].host").message.contains("missing"));
}

#[test]
fn more_than_the_maximum_number_of_ports_is_refused() {
    let w = World::new();
    let mut text = String::new();
    for i in 0..=MAX_PORTS {
        text.push_str(&format!("[[ports]]\nhost = {}\nguest = 80\n", 10_000 + i));
    }
    let diags = w.user_errors(&text);
    let d = find(&diags, &format!("ports[{MAX_PORTS}]"));
    assert!(d.message.contains("at most 32"), "{d}");
}
