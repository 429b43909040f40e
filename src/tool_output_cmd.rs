//! `troupe output SESSION OUTPUT_REF [--stderr]`: the whole output of a tool call whose result was cut, as its
//! `output_ref` names it (`tool_output.read`), written to stdout byte for byte, a mebibyte per request.
//!
//! `watch` and `run` print this command under a result that has an `output_ref`. The bytes are the tool's, raw: a
//! terminal shows whatever controls they hold, so pipe them to a file or a pager that cleans them.

use std::io::Write;

use anyhow::Context as _;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use troupe_protocol::client::{ClientOptions, ClientProtocol};
use troupe_protocol::types::tool_output::{OutputStream, ToolOutputReadParams};

use crate::cli_errors::explained;
use crate::commands::{Connected, Connection};
use crate::session_ref::resolve_session_id;

/// The line `watch` and `run` print under a result whose output was cut.
pub fn whole_output_hint(session_id: &str, output_ref: &str) -> String {
    format!("output cut; whole output: troupe output {session_id} {output_ref}")
}

pub async fn output(
    connection: &Connection,
    session: &str,
    output_ref: &str,
    stream: OutputStream,
) -> anyhow::Result<()> {
    let Connected { client, .. } = connection.open(ClientOptions::default()).await?;
    let session_id = resolve_session_id(&client, session).await?;
    let mut offset = 0;
    loop {
        let params = ToolOutputReadParams {
            session_id: session_id.clone(),
            output_ref: output_ref.to_owned(),
            stream,
            offset,
            limit: None,
        };
        let read = client.tool_output_read(params).await.map_err(explained)?;
        let data = BASE64.decode(&read.data).context("the daemon sent bytes that are not base64")?;
        let mut stdout = std::io::stdout().lock();
        match stdout.write_all(&data).and_then(|()| stdout.flush()) {
            Ok(()) => {}
            // A reader that stopped (`| head`) ends the command quietly.
            Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => return Ok(()),
            Err(error) => return Err(error).context("writing the output"),
        }
        if !read.eof && read.next_offset <= offset {
            anyhow::bail!("the daemon stopped advancing at byte {offset} of the stored output without saying it ended");
        }
        offset = read.next_offset;
        if read.eof {
            if read.total_bytes > read.stored_bytes {
                eprintln!(
                    "(the stored output ends here: the {} stream produced {} bytes, {} were stored; `[tools] \
                     max_stored_output_bytes` bounds it)",
                    stream.as_str(),
                    read.total_bytes,
                    read.stored_bytes
                );
            }
            return Ok(());
        }
    }
}
