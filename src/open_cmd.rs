//! `troupe open`: prints a one-time sign-in link for the web console.
//!
//! The daemon mints the code (`console.login_code`) and keeps only its hash; the link is good for one sign-in within
//! five minutes. The link's address is the one this command reached the daemon at, turned into HTTP(S) with a
//! proxy's path prefix kept, or `--public-url` when the browser reaches the daemon elsewhere (through a proxy in
//! front of a unix socket, or from another machine).

use clap::{Args, Subcommand};
use troupe_protocol::client::ClientOptions;

use crate::cli_errors::explained;
use crate::client_args::ClientArgs;
use crate::connection::Connected;
use crate::output::{Output, emit};
use troupe_protocol::client::ClientProtocol;

/// `troupe open`, flattened into the `troupe` command line.
#[derive(Subcommand, Debug)]
pub enum OpenCommand {
    /// Print a one-time link that signs a browser in to the daemon's web console (good once, for 5 minutes).
    Open(OpenArgs),
}

#[derive(Args, Debug)]
pub struct OpenArgs {
    #[command(flatten)]
    client: ClientArgs,
    /// The address your browser reaches the daemon at, e.g. https://troupe.example.com/agent/ (default: the URL
    /// this command connects to, as http:// or https://).
    #[arg(long, value_name = "URL")]
    public_url: Option<String>,
    /// Print the link only: do not open it in a browser (one is opened where $BROWSER is set, or a desktop
    /// session has xdg-open).
    #[arg(long)]
    no_browser: bool,
    /// Print `{"url": …, "expires_at": …}` (opens no browser).
    #[arg(long)]
    json: bool,
}

impl OpenCommand {
    pub fn run(self) -> anyhow::Result<u8> {
        let OpenCommand::Open(args) = self;
        crate::commands::block_on(open(args)).map(|()| 0)
    }
}

async fn open(args: OpenArgs) -> anyhow::Result<()> {
    let connection = args.client.connection();
    let base = match &args.public_url {
        Some(public) => public_base(public)?,
        None => crate::daemon_url::http_base(&connection.url()).ok_or_else(|| {
            anyhow::anyhow!(
                "the daemon is reached at {}, which a browser cannot open; pass --public-url with the address your \
                 browser reaches it at (e.g. the reverse proxy's https://host/)",
                connection.url()
            )
        })?,
    };
    let Connected { client, .. } = connection.open(ClientOptions::default()).await?;
    let code = client.console_login_code(Default::default()).await.map_err(explained)?;
    client.close().await;
    let url = format!("{base}{}", code.path);
    let json = serde_json::json!({ "url": url, "expires_at": code.expires_at });
    let opened = if args.json || args.no_browser { None } else { open_in_browser(&url) };
    let expiry = expiry_words(&code.expires_at, std::time::SystemTime::now());
    emit(Output::from_flag(args.json), &json, || match &opened {
        Some(browser) => {
            format!("{url}\nOpened in your browser ({browser}) to sign in. The link works once and {expiry}.")
        }
        None => format!("{url}\nOpen it in your browser to sign in. It works once and {expiry}."),
    })
}

/// Opens `url` with `$BROWSER`, else with `xdg-open` in a desktop session (`$DISPLAY` or `$WAYLAND_DISPLAY` set);
/// the program's name when it started. Nothing is opened over ssh without a display, where no browser would show.
fn open_in_browser(url: &str) -> Option<String> {
    let browser = std::env::var("BROWSER").ok().filter(|browser| !browser.trim().is_empty());
    let desktop =
        ["DISPLAY", "WAYLAND_DISPLAY"].iter().any(|name| std::env::var_os(name).is_some_and(|v| !v.is_empty()));
    let program = match browser {
        // `$BROWSER` may list several programs, tried in turn (`firefox:chromium`).
        Some(browsers) => browsers.split(':').map(str::trim).find(|browser| !browser.is_empty())?.to_owned(),
        None if desktop => "xdg-open".to_owned(),
        None => return None,
    };
    let started = std::process::Command::new(&program)
        .arg(url)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
    match started {
        // Not waited for: a browser may run long after this command; xdg-open hands over and exits.
        Ok(_) => Some(program),
        Err(_) => None,
    }
}

/// When a link expiring at `expires_at` (RFC 3339, UTC) stops working, from `now`, in a person's words: `expires in
/// 5 minutes (at 14:05 local time)`.
fn expiry_words(expires_at: &str, now: std::time::SystemTime) -> String {
    let Ok(at) = humantime::parse_rfc3339_weak(expires_at) else {
        return format!("expires at {expires_at}");
    };
    let left = at.duration_since(now).unwrap_or_default().as_secs();
    let minutes = left.div_ceil(60);
    let within = match left {
        0 => "has expired".to_owned(),
        1..=59 => format!("expires in {left} seconds"),
        _ if minutes == 1 => "expires in 1 minute".to_owned(),
        _ => format!("expires in {minutes} minutes"),
    };
    match local_clock(at) {
        Some(clock) if left > 0 => format!("{within} (at {clock} local time)"),
        _ => within,
    }
}

/// `at` as `HH:MM` in the local time zone (the C library's `localtime_r`, which reads `TZ` and /etc/localtime).
fn local_clock(at: std::time::SystemTime) -> Option<String> {
    let seconds = at.duration_since(std::time::UNIX_EPOCH).ok()?.as_secs();
    let time = libc::time_t::try_from(seconds).ok()?;
    // SAFETY: `localtime_r` writes only into the `tm` it is given, which lives for the call; a null return (a
    // time it cannot represent) is checked.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    let converted = unsafe { libc::localtime_r(&time, &mut tm) };
    (!converted.is_null()).then(|| format!("{:02}:{:02}", tm.tm_hour, tm.tm_min))
}

/// `--public-url` as a base ending in `/`: only http(s), no query or fragment.
fn public_base(url: &str) -> anyhow::Result<String> {
    let lower = url.to_ascii_lowercase();
    if !(lower.starts_with("http://") || lower.starts_with("https://")) || url.contains(['?', '#']) {
        anyhow::bail!("--public-url must be an http:// or https:// address without ?query or #fragment, got {url:?}");
    }
    Ok(if url.ends_with('/') { url.to_owned() } else { format!("{url}/") })
}

#[cfg(test)]
mod tests {
    use super::{expiry_words, public_base};

    #[test]
    fn the_expiry_is_said_relative_to_now() {
        let now = humantime::parse_rfc3339("2026-03-01T10:00:00Z").unwrap();
        let words = expiry_words("2026-03-01T10:05:00Z", now);
        assert!(words.starts_with("expires in 5 minutes (at "), "{words}");
        assert!(words.ends_with(" local time)") && !words.contains('Z'), "{words}");
        assert_eq!(expiry_words("2026-03-01T10:00:30Z", now).split(" (").next(), Some("expires in 30 seconds"));
        assert_eq!(expiry_words("2026-03-01T09:00:00Z", now), "has expired");
    }

    #[test]
    fn public_urls_end_in_a_slash() {
        assert_eq!(public_base("https://host/agent").unwrap(), "https://host/agent/");
        assert_eq!(public_base("http://127.0.0.1:7419/").unwrap(), "http://127.0.0.1:7419/");
        assert!(public_base("ws://host/ws").is_err());
        assert!(public_base("https://host/?x").is_err());
    }
}
