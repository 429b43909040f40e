//! Raw HTTP/1.1 for the console's wire checks (`web_console.rs`, `cluster_console.rs`): one request per connection, the response read as the bytes came, so
//! a test sees every header exactly as the daemon sent it (a client library would merge, follow or hide some).

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};

use super::support::WAIT;

/// One HTTP/1.1 response, read raw.
#[derive(Debug)]
pub(super) struct Response {
    pub(super) status: u16,
    pub(super) headers: Vec<(String, String)>,
    pub(super) body: Vec<u8>,
}

impl Response {
    pub(super) fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(key, _)| key.eq_ignore_ascii_case(name)).map(|(_, value)| value.as_str())
    }

    pub(super) fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// `NAME=VALUE` of the console cookie from the Set-Cookie header: `troupe_console`, or `troupe_console_<suffix>`
    /// where the daemon tells its cookie from another daemon's on another port of the host (ports share cookies).
    pub(super) fn console_cookie(&self) -> Option<String> {
        let set = self.header("set-cookie")?;
        let pair = set.split(';').next()?.trim();
        let (name, _) = pair.split_once('=')?;
        (name == "troupe_console" || name.starts_with("troupe_console_")).then(|| pair.to_owned())
    }
}

/// Sends `method path` with `headers` (and a form `body`) over a fresh connection and reads the response; a 101
/// answer is returned as soon as its head arrived.
pub(super) fn http(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Response {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream.set_read_timeout(Some(WAIT)).expect("timeout");
    let mut request = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\n");
    // An upgrade names its own Connection header; everything else is read to the end of one response.
    if !headers.iter().any(|(name, _)| name.eq_ignore_ascii_case("connection")) {
        request.push_str("Connection: close\r\n");
    }
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    if !body.is_empty() {
        request.push_str(&format!(
            "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    request.push_str("\r\n");
    request.push_str(body);
    stream.write_all(request.as_bytes()).expect("write request");

    let mut raw = Vec::new();
    let mut buffer = [0u8; 8192];
    let head_end = loop {
        if let Some(end) = raw.windows(4).position(|window| window == b"\r\n\r\n") {
            break end;
        }
        let read = stream.read(&mut buffer).expect("read response head");
        assert!(read > 0, "the connection closed before a response head: {:?}", String::from_utf8_lossy(&raw));
        raw.extend_from_slice(&buffer[..read]);
    };
    let head = String::from_utf8_lossy(&raw[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let status =
        lines.next().and_then(|line| line.split(' ').nth(1)).and_then(|code| code.parse().ok()).expect("status");
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_owned(), value.trim().to_owned()))
        .collect();
    let mut response = Response { status, headers, body: raw[head_end + 4..].to_vec() };
    if status == 101 || method == "HEAD" {
        return response;
    }
    let length = response.header("content-length").and_then(|value| value.parse::<usize>().ok());
    while length.is_none_or(|length| response.body.len() < length) {
        let read = stream.read(&mut buffer).expect("read body");
        if read == 0 {
            break;
        }
        response.body.extend_from_slice(&buffer[..read]);
    }
    if response.header("transfer-encoding").is_some_and(|value| value.contains("chunked")) {
        response.body = dechunk(&response.body);
    }
    response
}

fn dechunk(mut raw: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    while let Some(line_end) = raw.windows(2).position(|window| window == b"\r\n") {
        let size = usize::from_str_radix(String::from_utf8_lossy(&raw[..line_end]).trim(), 16).expect("chunk size");
        if size == 0 {
            break;
        }
        body.extend_from_slice(&raw[line_end + 2..line_end + 2 + size]);
        raw = &raw[line_end + 2 + size + 2..];
    }
    body
}
