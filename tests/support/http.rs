//! reqwest as a test's HTTP client: one call sends a request and reads its
//! whole answer, so a check is one line.
//!
//! ```ignore
//! let r = support::send(http.get(format!("{}/v2/", svc.url()))).await;
//! assert_eq!(r.status, 200);
//! assert_eq!(r.headers["content-type"], "application/json");
//! ```

use reqwest::header::HeaderMap;
use reqwest::{RequestBuilder, StatusCode};

/// A whole answer: status, headers and body.
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
}

impl Answer {
    /// The body as text (lossy).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body as JSON (a panic naming the body if it is not).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }

    /// Header `name` as text (a panic if it is absent or not text).
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .unwrap_or_else(|| panic!("no {name} header in {:?}", self.headers))
            .to_str()
            .expect("a text header")
    }
}

/// Send `req` and read the whole body; a failed request or a body cut
/// short panics (tests that expect a cut body read the response themselves).
pub async fn send(req: RequestBuilder) -> Answer {
    let r = req.send().await.expect("sending the request");
    let status = r.status();
    let headers = r.headers().clone();
    let body = r.bytes().await.expect("reading the body").to_vec();
    Answer {
        status,
        headers,
        body,
    }
}
