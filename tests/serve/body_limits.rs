//! Request bodies are bounded before their parser and parsed off the async
//! workers (issue 19, item 5), against a real `talos-gen serve`: bodies
//! nested 30,000 deep (YAML flow, JSON) on `POST /schematics`,
//! `/api/v1/machineconfig` and `/api/v1/kubelet-reservations` are each a
//! 400 within 3 s, and wide bodies that pass the structural check (the
//! parser runs on each) keep no one else waiting: `/healthz` answers within
//! 0.5 s throughout.

use std::time::{Duration, Instant};

use crate::support::{Service, raw_request};

/// `POST path` with `body`; status, body text, time taken.
fn post(port: u16, path: &str, ctype: &str, body: &str) -> (u16, String, Duration) {
    let req = format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let t = Instant::now();
    let (code, _, b) = raw_request(port, req.as_bytes(), Duration::from_secs(60));
    (code, String::from_utf8_lossy(&b).into_owned(), t.elapsed())
}

/// One answer of a burst: path, status, body text, time taken.
type Posted = (String, u16, String, Duration);

/// Send every `(path, content type, body)` at once from threads while
/// `/healthz` is asked every 20 ms; the answers, and the slowest `/healthz`.
fn burst(
    svc: &Service,
    bodies: Vec<(&'static str, &'static str, String)>,
) -> (Vec<Posted>, Duration, usize) {
    let port = svc.port;
    let posts: Vec<_> = bodies
        .into_iter()
        .map(|(path, ctype, body)| {
            std::thread::spawn(move || {
                let (code, text, took) = post(port, path, ctype, &body);
                (path.to_string(), code, text, took)
            })
        })
        .collect();
    let (mut slowest, mut probes) = (Duration::ZERO, 0);
    while posts.iter().any(|p| !p.is_finished()) {
        let t = Instant::now();
        let (code, _, body) = raw_request(
            port,
            b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            Duration::from_secs(30),
        );
        let took = t.elapsed();
        assert_eq!(
            (code, body.as_slice()),
            (200, b"ok\n".as_slice()),
            "/healthz"
        );
        slowest = slowest.max(took);
        probes += 1;
        std::thread::sleep(Duration::from_millis(20));
    }
    let answers = posts.into_iter().map(|p| p.join().unwrap()).collect();
    (answers, slowest, probes)
}

#[test]
fn bodies_nested_30000_deep_are_400_within_3s_and_healthz_keeps_answering() {
    let dir = tempfile::tempdir().unwrap();
    let svc = Service::start(&["--cache-dir", dir.path().to_str().unwrap(), "--offline"]);
    const N: usize = 30_000;
    let flow = format!("{}{}", "[".repeat(N), "]".repeat(N));
    let json = format!("{}1{}", "{\"a\":".repeat(N), "}".repeat(N));
    let values = format!("clusterName: x\nvalues: {flow}\n");
    let mut bodies = Vec::new();
    for _ in 0..2 {
        bodies.push(("/schematics", "application/yaml", flow.clone()));
        bodies.push(("/schematics", "application/json", json.clone()));
        bodies.push(("/api/v1/machineconfig", "application/json", json.clone()));
        bodies.push(("/api/v1/machineconfig", "application/yaml", values.clone()));
        bodies.push((
            "/api/v1/kubelet-reservations",
            "application/json",
            json.clone(),
        ));
        bodies.push((
            "/api/v1/kubelet-reservations",
            "application/yaml",
            flow.clone(),
        ));
    }
    let (answers, slowest, probes) = burst(&svc, bodies);
    let worst = answers.iter().map(|a| a.3).max().unwrap();
    eprintln!(
        "12 deep bodies: slowest 400 after {worst:?}; /healthz at worst {slowest:?} over {probes} probes"
    );
    for (path, code, text, took) in &answers {
        assert_eq!(*code, 400, "{path}: {text}");
        assert!(
            text.contains("nested deeper than 128 levels")
                && text.contains("refused before parsing"),
            "{path}: {text}"
        );
        assert!(
            *took < Duration::from_secs(3),
            "{path}: a 400 after {took:?}"
        );
    }
    assert!(
        slowest < Duration::from_millis(500),
        "/healthz took {slowest:?} at worst while the bodies were refused ({probes} probes)"
    );
    assert_eq!(
        svc.log_text().matches("panicked").count(),
        0,
        "{}",
        svc.log_text()
    );
}

#[test]
fn wide_bodies_parse_off_the_workers_and_healthz_keeps_answering() {
    let dir = tempfile::tempdir().unwrap();
    let svc = Service::start(&["--cache-dir", dir.path().to_str().unwrap(), "--offline"]);
    // 90,000 entries: under the node limit, so the parser reads each whole
    // (then refuses it: a schematic is a mapping); 12 of them at once.
    let wide = format!("[{}1]", "1, ".repeat(90_000));
    let bodies = (0..12)
        .map(|i| {
            let path = if i % 2 == 0 {
                "/schematics"
            } else {
                "/api/v1/kubelet-reservations"
            };
            (path, "application/yaml", wide.clone())
        })
        .collect();
    let (answers, slowest, probes) = burst(&svc, bodies);
    let worst = answers.iter().map(|a| a.3).max().unwrap();
    eprintln!(
        "12 wide bodies: slowest answer after {worst:?}; /healthz at worst {slowest:?} over {probes} probes"
    );
    for (path, code, text, _) in &answers {
        assert_eq!(*code, 400, "{path}: {text}");
    }
    assert!(probes >= 1);
    assert!(
        slowest < Duration::from_millis(500),
        "/healthz took {slowest:?} at worst while 12 wide bodies were parsed ({probes} probes)"
    );
}
