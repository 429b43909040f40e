//! What `web_fetch` makes of a response's body: HTML becomes Markdown, other text passes through, anything else
//! is refused with a sentence that says what it was.
//!
//! HTML is parsed with html5ever and written as Markdown by `htmd`, which walks the tree recursively: one stack
//! frame or more per level of nesting. A page is text from anyone, and a stack overflow aborts the whole daemon, so
//! the walk runs on a thread of its own with a large stack, and a page nested deeper than [`MAX_HTML_DEPTH`] (no
//! real page is) is not walked at all but reduced to its text by a flat scan ([`strip_tags`]). The depth is
//! estimated by a scan of the tags before anything is parsed ([`nesting_estimate`]) and measured on the tree after:
//! the parser's own work grows with the nesting (its scope checks walk the open elements), so a page of 100,000
//! nested `div`s must never reach it.

use std::rc::Rc;

/// The deepest element nesting converted to Markdown; deeper pages are reduced to their text.
pub const MAX_HTML_DEPTH: usize = 512;

/// The stack of the thread that converts a page: room for [`MAX_HTML_DEPTH`] levels of `htmd`'s recursion, with a
/// wide margin for debug builds' larger frames.
const CONVERTER_STACK_BYTES: usize = 64 * 1024 * 1024;

/// Elements whose content is not text a reader sees.
const SKIPPED_ELEMENTS: [&str; 11] =
    ["head", "script", "style", "noscript", "template", "svg", "canvas", "iframe", "object", "embed", "button"];

/// How a body is to be read, from its `Content-Type` (or, without one, its first bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyKind {
    Html,
    Text,
    /// Not text: refused.
    Binary,
}

/// The kind of a body of media type `content_type` (the header's value, parameters included, or `None`).
pub fn body_kind(content_type: Option<&str>, body: &[u8]) -> BodyKind {
    let Some(content_type) = content_type else {
        return sniff(body);
    };
    let essence = content_type.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
    match essence.as_str() {
        "text/html" | "application/xhtml+xml" => BodyKind::Html,
        "" => sniff(body),
        _ if essence.starts_with("text/") => BodyKind::Text,
        _ if essence.ends_with("+json") || essence.ends_with("+xml") => BodyKind::Text,
        "application/json"
        | "application/xml"
        | "application/javascript"
        | "application/ecmascript"
        | "application/x-javascript"
        | "application/yaml"
        | "application/x-yaml"
        | "application/toml"
        | "application/x-sh"
        | "application/sql"
        | "application/graphql"
        | "application/x-ndjson" => BodyKind::Text,
        _ => BodyKind::Binary,
    }
}

/// A body without a usable type: HTML when it starts like a page, text when its start is UTF-8 without NUL bytes.
fn sniff(body: &[u8]) -> BodyKind {
    let start = &body[..body.len().min(1024)];
    let text = String::from_utf8_lossy(start);
    let lowered = text.trim_start().to_ascii_lowercase();
    if lowered.starts_with("<!doctype html") || lowered.starts_with("<html") {
        return BodyKind::Html;
    }
    let valid = match std::str::from_utf8(start) {
        Ok(_) => true,
        // Only a character cut by the 1 KiB window may be incomplete.
        Err(error) => error.error_len().is_none(),
    };
    if valid && !start.contains(&0) { BodyKind::Text } else { BodyKind::Binary }
}

/// The Markdown of an HTML page (invalid UTF-8 replaced). Runs the conversion on a thread of its own with a large
/// stack and waits for it: call it from a blocking context.
pub fn html_to_markdown(html: &[u8]) -> String {
    let html = String::from_utf8_lossy(html).into_owned();
    let converted = std::thread::Builder::new()
        .name("web-fetch-html".into())
        .stack_size(CONVERTER_STACK_BYTES)
        .spawn(move || convert_on_this_thread(&html));
    match converted.map(std::thread::JoinHandle::join) {
        Ok(Ok(markdown)) => markdown,
        Ok(Err(_panic)) => "[the page could not be converted to text]".to_owned(),
        Err(error) => format!("[the page could not be converted to text: {error}]"),
    }
}

fn convert_on_this_thread(html: &str) -> String {
    if nesting_estimate(html) > MAX_HTML_DEPTH {
        return strip_tags(html);
    }
    let converter = htmd::HtmlToMarkdown::builder().skip_tags(SKIPPED_ELEMENTS.to_vec()).build();
    let tree = match converter.html_to_tree(html) {
        Ok(tree) => tree,
        Err(_) => return strip_tags(html),
    };
    if depth(&tree) > MAX_HTML_DEPTH {
        return strip_tags(html);
    }
    tidy(&converter.tree_to_markdown(&tree))
}

/// Elements that never hold content: no end tag follows them.
const VOID_ELEMENTS: [&str; 14] =
    ["area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source", "track", "wbr"];

/// Elements whose end tag may be left out (the parser closes them by itself), and those that are always there.
const OPTIONAL_END_ELEMENTS: [&str; 20] = [
    "p", "li", "dt", "dd", "option", "optgroup", "tr", "td", "th", "thead", "tbody", "tfoot", "colgroup", "caption",
    "rb", "rt", "rp", "html", "head", "body",
];

/// How deep the page's elements nest, by counting start and end tags in one pass: void elements, self-closed tags
/// and elements whose end tag is optional do not count, comments and the contents of `script` and `style` are
/// skipped. An estimate (broken markup can drift it either way) that is cheap whatever the page.
pub fn nesting_estimate(html: &str) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let mut rest = html;
    while let Some(open) = rest.find('<') {
        rest = &rest[open + 1..];
        if let Some(comment) = rest.strip_prefix("!--") {
            rest = comment.find("-->").map_or("", |end| &comment[end + 3..]);
            continue;
        }
        let closing = rest.starts_with('/');
        let name_start = usize::from(closing);
        let name_length =
            rest[name_start..].find(|c: char| !c.is_ascii_alphanumeric()).unwrap_or(rest.len() - name_start);
        let name = rest[name_start..name_start + name_length].to_ascii_lowercase();
        let end = rest.find('>').unwrap_or(rest.len());
        let self_closed = rest[..end].ends_with('/');
        rest = &rest[(end + 1).min(rest.len())..];
        if name.is_empty() || VOID_ELEMENTS.contains(&name.as_str()) || OPTIONAL_END_ELEMENTS.contains(&name.as_str()) {
            continue;
        }
        if closing {
            depth = depth.saturating_sub(1);
        } else if !self_closed {
            if name == "script" || name == "style" {
                let lowered = rest.to_ascii_lowercase();
                let close = format!("</{name}");
                rest = lowered.find(&close).map_or("", |at| &rest[at..]);
                // The end tag itself is read by the next turn of the loop.
            }
            depth += 1;
            deepest = deepest.max(depth);
        }
    }
    deepest
}

/// The deepest nesting of the tree, counted without recursion.
fn depth(root: &Rc<htmd::Node>) -> usize {
    let mut deepest = 0;
    let mut pending = vec![(root.clone(), 0usize)];
    while let Some((node, level)) = pending.pop() {
        deepest = deepest.max(level);
        pending.extend(node.children.borrow().iter().map(|child| (child.clone(), level + 1)));
    }
    deepest
}

/// Collapses runs of blank lines, which pages full of empty blocks leave behind.
fn tidy(markdown: &str) -> String {
    let mut tidied = String::with_capacity(markdown.len());
    let mut blank_lines = 0;
    for line in markdown.lines() {
        let line = line.trim_end();
        if line.is_empty() {
            blank_lines += 1;
            if blank_lines > 1 {
                continue;
            }
        } else {
            blank_lines = 0;
        }
        tidied.push_str(line);
        tidied.push('\n');
    }
    tidied.trim().to_owned()
}

/// The text of an HTML page by a flat scan: tags dropped (with the contents of `script` and `style`), the common
/// entities decoded, whitespace collapsed. For pages the converter must not walk.
pub fn strip_tags(html: &str) -> String {
    let mut text = String::with_capacity(html.len() / 2);
    let mut rest = html;
    while let Some(open) = rest.find('<') {
        text.push_str(&rest[..open]);
        text.push(' ');
        let tag = &rest[open..];
        let lowered: String = tag.chars().take(8).collect::<String>().to_ascii_lowercase();
        let skipped_until = ["script", "style"].into_iter().find_map(|name| {
            lowered.strip_prefix('<').filter(|after| after.starts_with(name)).map(|_| format!("</{name}"))
        });
        rest = match skipped_until {
            Some(closing) => match tag.to_ascii_lowercase().find(&closing) {
                Some(end) => &tag[end + closing.len()..],
                None => "",
            },
            None => &tag[1..],
        };
        rest = match rest.find('>') {
            Some(end) => &rest[end + 1..],
            None => "",
        };
    }
    text.push_str(rest);
    let decoded = decode_entities(&text);
    decoded.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn decode_entities(text: &str) -> String {
    const ENTITIES: [(&str, &str); 6] =
        [("&lt;", "<"), ("&gt;", ">"), ("&quot;", "\""), ("&#39;", "'"), ("&nbsp;", " "), ("&amp;", "&")];
    let mut decoded = text.to_owned();
    for (entity, character) in ENTITIES {
        decoded = decoded.replace(entity, character);
    }
    decoded
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn html_becomes_markdown_without_scripts_styles_or_the_head() {
        let page = br#"<!DOCTYPE html><html><head><title>T</title><style>p{color:red}</style></head>
            <body><h1>Release notes</h1><script>alert("x")</script>
            <p>Version <b>2.0</b> adds <a href="https://example.com/x">links</a>.</p>
            <ul><li>one</li><li>two</li></ul>
            <pre><code>cargo build</code></pre></body></html>"#;
        let markdown = html_to_markdown(page);
        assert!(markdown.starts_with("# Release notes"), "{markdown}");
        assert!(markdown.contains("Version **2.0** adds [links](https://example.com/x)."), "{markdown}");
        assert!(markdown.contains("*   one"), "{markdown}");
        assert!(markdown.contains("```\ncargo build\n```"), "{markdown}");
        for absent in ["alert", "color:red", "<title>"] {
            assert!(!markdown.contains(absent), "{absent} in {markdown}");
        }
    }

    #[test]
    fn broken_markup_invalid_utf8_and_empty_pages_convert_without_failing() {
        assert_eq!(html_to_markdown(b"<p>unclosed <b>bold"), "unclosed **bold**");
        assert_eq!(html_to_markdown(b"<p>caf\xe9</p>"), "caf\u{fffd}");
        assert_eq!(html_to_markdown(b""), "");
        assert_eq!(html_to_markdown(b"<p></p><p></p><div>\n\n\n</div><p>x</p>"), "x");
    }

    #[test]
    fn a_page_nested_beyond_the_limit_is_reduced_to_its_text_without_overflowing_the_stack() {
        let depth = 100_000;
        let page = format!("{}deep text{}", "<div>".repeat(depth), "</div>".repeat(depth));
        assert_eq!(html_to_markdown(page.as_bytes()), "deep text");
        let within = MAX_HTML_DEPTH - 10;
        let page = format!("{}<b>kept</b>{}", "<div>".repeat(within), "</div>".repeat(within));
        assert_eq!(html_to_markdown(page.as_bytes()), "**kept**");
    }

    #[test]
    fn the_nesting_estimate_counts_elements_that_need_their_end_tag() {
        assert_eq!(nesting_estimate("<div><p>a<p>b<ul><li>c<li>d</ul><br><img src=x/></div>"), 2);
        assert_eq!(nesting_estimate("<!-- <div><div> --><span>x</span><script>if (a<b) { '<div>' }</script>"), 1);
        assert_eq!(nesting_estimate(&"<div>".repeat(1000)), 1000);
        assert_eq!(nesting_estimate("<div/><x-y></x-y>< not a tag"), 1);
    }

    #[test]
    fn strip_tags_drops_markup_scripts_and_styles_and_decodes_entities() {
        let html = "<p>a &amp; b</p><SCRIPT>var x = '<p>';</SCRIPT><style>p{}</style>\n<i>c&lt;d</i><br/>e";
        assert_eq!(strip_tags(html), "a & b c<d e");
        assert_eq!(strip_tags("unterminated <b"), "unterminated");
    }

    #[test]
    fn body_kinds_follow_the_content_type_or_else_the_first_bytes() {
        assert_eq!(body_kind(Some("text/html; charset=utf-8"), b""), BodyKind::Html);
        assert_eq!(body_kind(Some("TEXT/PLAIN"), b""), BodyKind::Text);
        assert_eq!(body_kind(Some("application/json"), b"{}"), BodyKind::Text);
        assert_eq!(body_kind(Some("application/vnd.api+json"), b"{}"), BodyKind::Text);
        assert_eq!(body_kind(Some("image/png"), b"\x89PNG"), BodyKind::Binary);
        assert_eq!(body_kind(Some("application/octet-stream"), b"text"), BodyKind::Binary);
        assert_eq!(body_kind(None, b"  <!doctype HTML><p>x"), BodyKind::Html);
        assert_eq!(body_kind(None, b"plain words"), BodyKind::Text);
        assert_eq!(body_kind(None, b"\x00\x01\x02"), BodyKind::Binary);
        assert_eq!(body_kind(Some(""), b"\xff\xfe"), BodyKind::Binary);
    }
}
