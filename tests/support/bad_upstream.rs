//! A misbehaving HTTP upstream, written for the tests, for the faults a
//! real server cannot be made to show on demand: nginx always answers a
//! request it accepted (there is no directive to hold a connection open
//! without ever sending the response head), sends a body it started at
//! full speed or at a steady `limit_rate` (it cannot stop half-way and go
//! silent while keeping the connection, nor trickle one byte per interval
//! for ever). Faults a real server *can* show (a flipped byte with the
//! right length, a slow but steady upstream) are tested against nginx.
//!
//! The fault is chosen by a word in the request path:
//! - `hang`: the request is read, nothing is ever sent;
//! - `stall`: the head (with a `Content-Length`) and half the body, then silence;
//! - `trickle`: the head, then one byte every `trickle_every`;
//! - `unframed`: the head with neither `Content-Length` nor chunked
//!   encoding, the whole body, then the connection closed (nginx frames
//!   every answer; a cut at the right byte of such a body looks whole);
//! - `chunked`: the whole body in chunks, properly ended;
//! - `slow`: `good`, whole, after `trickle_every` of silence (a healthy
//!   upstream that takes its time: nginx cannot delay an answer);
//! - anything else: `good` (the body given at start), whole.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The fault a request gets by the Talos version in its path, as the
/// tests use it: `v1.13.1` hangs, `v1.13.2` stalls, `v1.13.3` trickles,
/// `v1.13.4` is unframed, `v1.13.5` chunked, any other is good.
pub fn by_version(path: &str) -> &'static str {
    if path.contains("v1.13.1/") {
        "hang"
    } else if path.contains("v1.13.2/") {
        "stall"
    } else if path.contains("v1.13.3/") {
        "trickle"
    } else if path.contains("v1.13.4/") {
        "unframed"
    } else if path.contains("v1.13.5/") {
        "chunked"
    } else {
        "good"
    }
}

pub struct BadUpstream {
    pub port: u16,
    stop: Arc<AtomicBool>,
    requests: Arc<Mutex<Vec<String>>>,
    open: Arc<AtomicUsize>,
}

impl BadUpstream {
    /// Serve `good` for paths without a fault word; `map` rewrites a path
    /// to the word that picks its fault (e.g. by Talos version).
    pub fn start(
        good: Vec<u8>,
        trickle_every: Duration,
        map: fn(&str) -> &'static str,
    ) -> BadUpstream {
        let listener = TcpListener::bind("127.0.0.1:0").expect("binding the bad upstream");
        let port = listener.local_addr().unwrap().port();
        let stop = Arc::new(AtomicBool::new(false));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let open = Arc::new(AtomicUsize::new(0));
        let good = Arc::new(good);
        let (s, r, o) = (stop.clone(), requests.clone(), open.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if s.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let (s, r, o, good) = (s.clone(), r.clone(), o.clone(), good.clone());
                std::thread::spawn(move || {
                    o.fetch_add(1, Ordering::SeqCst);
                    let _ = handle(conn, &s, &r, &good, trickle_every, map);
                    o.fetch_sub(1, Ordering::SeqCst);
                });
            }
        });
        BadUpstream {
            port,
            stop,
            requests,
            open,
        }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Request lines received whose path contains `needle`.
    pub fn count(&self, needle: &str) -> usize {
        self.requests
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains(needle))
            .count()
    }

    /// Connections still open (a freed fill closes its upstream connection).
    pub fn open_connections(&self) -> usize {
        self.open.load(Ordering::SeqCst)
    }
}

impl Drop for BadUpstream {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

fn handle(
    conn: TcpStream,
    stop: &AtomicBool,
    requests: &Mutex<Vec<String>>,
    good: &[u8],
    trickle_every: Duration,
    map: fn(&str) -> &'static str,
) -> std::io::Result<()> {
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut w = conn;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Ok(());
        }
        let request = line.trim().to_string();
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h)? == 0 || h == "\r\n" || h == "\n" {
                break;
            }
        }
        requests.lock().unwrap().push(request.clone());
        let path = request.split_whitespace().nth(1).unwrap_or("/").to_string();
        let head = |w: &mut TcpStream| {
            write!(
                w,
                "HTTP/1.1 200 OK\r\nContent-Type: application/x-xz\r\nContent-Length: {}\r\n\r\n",
                good.len()
            )
        };
        match map(&path) {
            "hang" => {
                hold(reader.get_mut(), stop);
                return Ok(());
            }
            "stall" => {
                head(&mut w)?;
                w.write_all(&good[..good.len() / 2])?;
                w.flush()?;
                hold(reader.get_mut(), stop);
                return Ok(());
            }
            "trickle" => {
                head(&mut w)?;
                for b in good {
                    if stop.load(Ordering::SeqCst) {
                        return Ok(());
                    }
                    w.write_all(std::slice::from_ref(b))?;
                    w.flush()?;
                    std::thread::sleep(trickle_every);
                }
                return Ok(());
            }
            "unframed" => {
                write!(
                    w,
                    "HTTP/1.1 200 OK\r\nContent-Type: application/x-xz\r\nConnection: close\r\n\r\n"
                )?;
                w.write_all(good)?;
                w.flush()?;
                return Ok(());
            }
            "slow" => {
                std::thread::sleep(trickle_every);
                head(&mut w)?;
                w.write_all(good)?;
                w.flush()?;
            }
            "chunked" => {
                write!(
                    w,
                    "HTTP/1.1 200 OK\r\nContent-Type: application/x-xz\r\nTransfer-Encoding: chunked\r\n\r\n"
                )?;
                for c in good.chunks(100_000) {
                    write!(w, "{:x}\r\n", c.len())?;
                    w.write_all(c)?;
                    w.write_all(b"\r\n")?;
                }
                w.write_all(b"0\r\n\r\n")?;
                w.flush()?;
            }
            _ => {
                head(&mut w)?;
                w.write_all(good)?;
                w.flush()?;
            }
        }
    }
}

/// Wait until the test ends or the client goes away.
fn hold(r: &mut TcpStream, stop: &AtomicBool) {
    use std::io::Read;
    let _ = r.set_read_timeout(Some(Duration::from_millis(100)));
    let mut buf = [0u8; 1];
    while !stop.load(Ordering::SeqCst) {
        match r.read(&mut buf) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(_) => return,
        }
    }
}
