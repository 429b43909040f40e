//! Scraping `GET /metrics` of a test daemon over real HTTP, for the tests of the metrics themselves and of what
//! they count (snapshot use at load).

use std::collections::HashMap;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::support::{TestDaemon, WAIT, eventually_some, within};

/// One HTTP/1.1 GET of `/metrics`: the status code, the headers (lowercase names) and the body.
pub struct Scrape {
    pub status: u16,
    pub headers: String,
    pub body: String,
}

pub async fn get_metrics(daemon: &TestDaemon, authorization: Option<&str>) -> Scrape {
    let mut stream = within("connect", tokio::net::TcpStream::connect(daemon.addr)).await.expect("connect");
    let authorization = authorization.map(|value| format!("Authorization: {value}\r\n")).unwrap_or_default();
    let request = format!("GET /metrics HTTP/1.1\r\nHost: localhost\r\n{authorization}Connection: close\r\n\r\n");
    within("request", stream.write_all(request.as_bytes())).await.expect("write");
    let mut response = String::new();
    within("response", stream.read_to_string(&mut response)).await.expect("read");
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or_else(|| panic!("not an HTTP response: {response}"));
    let status = head.split(' ').nth(1).and_then(|code| code.parse().ok()).expect("status code");
    Scrape { status, headers: head.to_ascii_lowercase(), body: body.to_owned() }
}

/// The samples of an exposition, by series exactly as written (`name{label="value",...}`).
pub fn samples(text: &str) -> HashMap<String, f64> {
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .map(|line| {
            let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("not a sample: {line}"));
            (series.to_owned(), value.parse().unwrap_or_else(|_| panic!("not a number: {line}")))
        })
        .collect()
}

/// Scrapes with the daemon's token and parses the samples.
pub async fn scrape(daemon: &TestDaemon) -> HashMap<String, f64> {
    let scrape = get_metrics(daemon, Some(&format!("Bearer {}", daemon.token))).await;
    assert_eq!(scrape.status, 200, "{}", scrape.body);
    assert!(scrape.headers.contains("content-type: application/openmetrics-text"), "{}", scrape.headers);
    samples(&scrape.body)
}

pub fn value(samples: &HashMap<String, f64>, series: &str) -> f64 {
    *samples.get(series).unwrap_or_else(|| {
        let mut known: Vec<&String> = samples.keys().collect();
        known.sort();
        panic!("no series {series}; the scrape has {known:#?}")
    })
}

/// Scrapes until `series` has `expected` (state gauges follow actors that finish a moment after the events).
pub async fn eventually_value(daemon: &TestDaemon, series: &str, expected: f64) -> HashMap<String, f64> {
    eventually_some(&format!("{series} = {expected}"), WAIT, || async {
        let samples = scrape(daemon).await;
        (samples.get(series) == Some(&expected)).then_some(samples)
    })
    .await
}
