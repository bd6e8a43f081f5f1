//! A lying factory for `bench/chaos.sh`: a fake, on purpose. nginx is the
//! factory stand-in of every bench and stays so; this program answers only
//! while the chaos run switches nginx to `proxy_pass` here, for the faults
//! nginx cannot show on demand (the same reasons as the test helper
//! `tests/support/bad_upstream.rs`): a body cut short under its full
//! `Content-Length`, a body that stops half-way and goes silent with the
//! connection held open (a stall), and a flipped byte in a body of the right
//! length (nginx could serve a corrupted copy of the file, but then the
//! switch would be two: this keeps it one reload).
//!
//! ```text
//! fault_upstream PORT ROOT [STALL_SECS]
//! ```
//! Serves `GET`/`HEAD` of files under ROOT (the factory's tree). Each GET
//! gets one fault, in turn: `short`, `flip`, `stall` (held STALL_SECS,
//! default 40, or until the peer closes). A HEAD is answered truthfully.
//! Prints one line per request on stdout. Loopback only; stops on SIGTERM.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

fn main() {
    let a: Vec<String> = std::env::args().collect();
    if a.len() < 3 {
        eprintln!("usage: fault_upstream PORT ROOT [STALL_SECS]");
        std::process::exit(2);
    }
    let port: u16 = a[1].parse().expect("PORT");
    let root = PathBuf::from(&a[2]);
    let stall = Duration::from_secs(a.get(3).map_or(40, |s| s.parse().expect("STALL_SECS")));
    let listener = TcpListener::bind(("127.0.0.1", port)).expect("binding 127.0.0.1:PORT");
    let turn = Arc::new(AtomicUsize::new(0));
    for conn in listener.incoming() {
        let Ok(conn) = conn else { continue };
        let (root, turn) = (root.clone(), turn.clone());
        std::thread::spawn(move || {
            let _ = handle(conn, &root, &turn, stall);
        });
    }
}

/// One request (no keep-alive: every answer closes its connection).
fn handle(
    mut conn: TcpStream,
    root: &Path,
    turn: &AtomicUsize,
    stall: Duration,
) -> std::io::Result<()> {
    conn.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut r = BufReader::new(conn.try_clone()?);
    let mut line = String::new();
    r.read_line(&mut line)?;
    loop {
        let mut h = String::new();
        if r.read_line(&mut h)? == 0 || h == "\r\n" || h == "\n" {
            break;
        }
    }
    let mut parts = line.split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or("/"));
    let path = target.split('?').next().unwrap_or("/");
    let file = safe_join(root, path);
    let body = match file.and_then(|f| std::fs::read(f).ok()) {
        Some(b) => b,
        None => {
            println!("{method} {path} 404");
            return conn.write_all(
                b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            );
        }
    };
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    conn.write_all(head.as_bytes())?;
    if method == "HEAD" {
        println!("HEAD {path} ok");
        return Ok(());
    }
    let half = body.len() / 2;
    match turn.fetch_add(1, Ordering::SeqCst) % 3 {
        0 => {
            println!("GET {path} short");
            conn.write_all(&body[..half])?;
        }
        1 => {
            println!("GET {path} flip");
            let mut b = body;
            b[half] ^= 0x01;
            conn.write_all(&b)?;
        }
        _ => {
            println!("GET {path} stall");
            conn.write_all(&body[..half])?;
            // Silent with the connection open until the peer gives up or
            // the stall's time is over.
            conn.set_read_timeout(Some(Duration::from_millis(200)))?;
            let until = Instant::now() + stall;
            let mut buf = [0u8; 512];
            while Instant::now() < until {
                match conn.read(&mut buf) {
                    Ok(0) => break,
                    Ok(_) => {}
                    Err(e)
                        if matches!(
                            e.kind(),
                            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                        ) => {}
                    Err(_) => break,
                }
            }
        }
    }
    Ok(())
}

/// ROOT joined with a request path of plain names only (no `..`).
fn safe_join(root: &Path, path: &str) -> Option<PathBuf> {
    let rel = Path::new(path.trim_start_matches('/'));
    rel.components()
        .all(|c| matches!(c, Component::Normal(_)))
        .then(|| root.join(rel))
}
