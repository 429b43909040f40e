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
    /// Print `{"url": …, "expires_at": …}`.
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
    emit(Output::from_flag(args.json), &json, || {
        format!("{url}\nOpen it in your browser to sign in. It works once, until {}.", code.expires_at)
    })
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
    use super::public_base;

    #[test]
    fn public_urls_end_in_a_slash() {
        assert_eq!(public_base("https://host/agent").unwrap(), "https://host/agent/");
        assert_eq!(public_base("http://127.0.0.1:7419/").unwrap(), "http://127.0.0.1:7419/");
        assert!(public_base("ws://host/ws").is_err());
        assert!(public_base("https://host/?x").is_err());
    }
}
