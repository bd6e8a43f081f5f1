//! A TCP forwarder in front of a real server (Garage) that holds a
//! request: the fault a real bucket cannot be made to show on demand (a
//! slow network holding one PUT while other clients' requests go through).
//! `hold_at(pattern)` arms it: the first client-to-server chunk with a
//! line that starts with `method ` and holds `pattern` (a request line,
//! `PUT /bucket/prefix/index/<hex>.json HTTP/1.1`) stops that connection's
//! requests there until [`FaultProxy::release`]; everything else is
//! forwarded as it comes, both ways. Dropping it closes every connection.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

#[derive(Default)]
struct Hold {
    /// (method, pattern) armed, not yet met.
    armed: Option<(String, String)>,
    /// A request is held now.
    holding: bool,
    released: bool,
}

pub struct FaultProxy {
    addr: std::net::SocketAddr,
    hold: Arc<(Mutex<Hold>, Condvar)>,
    stop: Arc<AtomicBool>,
    conns: Arc<Mutex<Vec<TcpStream>>>,
}

impl FaultProxy {
    /// Forward `127.0.0.1:<port>` to `upstream` (`http://host:port` or `host:port`).
    pub fn start(upstream: &str) -> FaultProxy {
        let upstream = upstream.trim_start_matches("http://").to_string();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let hold: Arc<(Mutex<Hold>, Condvar)> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let conns: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let (h, s, c) = (hold.clone(), stop.clone(), conns.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if s.load(Ordering::Acquire) {
                    return;
                }
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(&upstream) else {
                    continue;
                };
                {
                    let mut c = c.lock().unwrap();
                    c.push(client.try_clone().unwrap());
                    c.push(server.try_clone().unwrap());
                }
                let (mut from_s, mut to_c) =
                    (server.try_clone().unwrap(), client.try_clone().unwrap());
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut from_s, &mut to_c);
                    let _ = to_c.shutdown(Shutdown::Write);
                });
                let h = h.clone();
                std::thread::spawn(move || forward_holding(client, server, &h));
            }
        });
        FaultProxy {
            addr,
            hold,
            stop,
            conns,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Hold the first request whose line starts with `method ` and holds
    /// `pattern`, until [`FaultProxy::release`].
    pub fn hold_at(&self, method: &str, pattern: &str) {
        let mut h = self.hold.0.lock().unwrap();
        h.armed = Some((method.to_string(), pattern.to_string()));
        h.released = false;
    }

    /// Wait (up to `limit`) until a request is held; whether one is.
    pub fn wait_held(&self, limit: Duration) -> bool {
        let t = Instant::now();
        let mut h = self.hold.0.lock().unwrap();
        while !h.holding {
            let left = limit.saturating_sub(t.elapsed());
            if left.is_zero() {
                return false;
            }
            h = self.hold.1.wait_timeout(h, left).unwrap().0;
        }
        true
    }

    /// Let the held request (and its connection) go on.
    pub fn release(&self) {
        let mut h = self.hold.0.lock().unwrap();
        h.released = true;
        h.holding = false;
        self.hold.1.notify_all();
    }
}

fn forward_holding(mut client: TcpStream, mut server: TcpStream, hold: &(Mutex<Hold>, Condvar)) {
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = match client.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let chunk = &buf[..n];
        {
            let mut h = hold.0.lock().unwrap();
            let hit = h.armed.as_ref().is_some_and(|(m, p)| {
                String::from_utf8_lossy(chunk)
                    .lines()
                    .any(|l| l.starts_with(&format!("{m} ")) && l.contains(p.as_str()))
            });
            if hit {
                h.armed = None;
                h.holding = true;
                hold.1.notify_all();
                while !h.released {
                    h = hold.1.wait(h).unwrap();
                }
            }
        }
        if server.write_all(chunk).is_err() {
            break;
        }
    }
    let _ = server.shutdown(Shutdown::Write);
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        self.release();
        let _ = TcpStream::connect(self.addr);
        for c in self.conns.lock().unwrap().drain(..) {
            let _ = c.shutdown(Shutdown::Both);
        }
    }
}
