//! Masking secrets out of tool output: whole texts, byte output and streams split anywhere.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "a test crate: a panic is how a test reports failure")]

use troupe_runtime::redact::{MIN_SECRET_BYTES, Secrets, StreamRedactor};

const TOKEN: &str = "tok_3f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c";
const KEY: &str = "sk-proj-0123456789abcdefghijklmnopqrstuvwxyz";

fn secrets() -> Secrets {
    let secrets = Secrets::new();
    assert!(secrets.set("daemon token", TOKEN.to_owned()));
    assert!(secrets.set("openai API key", KEY.to_owned()));
    secrets
}

/// Streams `input` cut at `cuts` and returns what came out, checking that nothing is lost or added.
fn stream(secrets: &Secrets, input: &[u8], cuts: &[usize]) -> (Vec<u8>, Vec<String>) {
    let mut redactor: StreamRedactor = secrets.stream();
    let mut output = Vec::new();
    let mut from = 0;
    for &cut in cuts.iter().chain(std::iter::once(&input.len())) {
        output.extend(redactor.push(&input[from..cut]));
        from = cut;
    }
    output.extend(redactor.finish());
    assert_eq!(redactor.held_len(), 0);
    assert_eq!(output.len(), input.len(), "the stream keeps its length");
    (output, redactor.labels().to_vec())
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|window| window == needle)
}

#[test]
fn a_token_in_the_middle_is_masked_with_the_same_length() {
    let secrets = secrets();
    let text = format!("before {TOKEN} after");
    let redacted = secrets.redact(&text);
    assert_eq!(redacted.text.len(), text.len());
    assert!(!redacted.text.contains(TOKEN));
    assert_eq!(redacted.text, format!("before [redacted: daemon token]{} after", "*".repeat(TOKEN.len() - 24)));
    assert_eq!(redacted.labels, ["daemon token"]);
}

#[test]
fn two_secrets_and_repeats_are_all_masked_and_labelled_once() {
    let secrets = secrets();
    let text = format!("{KEY}\n{TOKEN} and again {KEY}{TOKEN}");
    let redacted = secrets.redact(&text);
    assert_eq!(redacted.text.len(), text.len());
    assert!(!redacted.text.contains(TOKEN) && !redacted.text.contains(KEY));
    assert!(!redacted.text.contains("sk-proj") && !redacted.text.contains("tok_"));
    assert_eq!(redacted.labels, ["openai API key", "daemon token"]);
    assert!(redacted.text.starts_with("[redacted: openai API key]"));
}

#[test]
fn a_secret_shorter_than_its_marker_becomes_stars() {
    let secrets = Secrets::new();
    assert!(secrets.set("a rather long label for a short secret", "12345678".to_owned()));
    let redacted = secrets.redact("x12345678y");
    assert_eq!(redacted.text, "x********y");
}

#[test]
fn short_secrets_are_ignored_and_text_without_secrets_is_unchanged() {
    let secrets = secrets();
    assert!(!secrets.set("tiny", "a".repeat(MIN_SECRET_BYTES - 1)));
    assert_eq!(secrets.labels(), ["daemon token", "openai API key"]);
    let text = "tok_3f9a sk-proj- nothing secret here: aaaaaaa é ü";
    let redacted = secrets.redact(text);
    assert_eq!(redacted.text, text);
    assert!(redacted.labels.is_empty());
    // Almost the token, one byte off at the end.
    let near = &TOKEN[..TOKEN.len() - 1];
    assert_eq!(secrets.redact(&format!("{near}X")).text, format!("{near}X"));
}

#[test]
fn set_replaces_and_remove_forgets() {
    let secrets = secrets();
    let shared = secrets.clone();
    assert!(shared.set("daemon token", "new-token-value-123".to_owned()));
    assert_eq!(secrets.redact(TOKEN).text, TOKEN, "the old token is no longer masked");
    assert_ne!(secrets.redact("new-token-value-123").text, "new-token-value-123");
    assert!(secrets.remove("openai API key"));
    assert!(!secrets.remove("openai API key"));
    assert_eq!(secrets.redact(KEY).text, KEY);
    assert!(!format!("{secrets:?}").contains("new-token"), "Debug shows labels only");
}

#[test]
fn non_utf8_bytes_are_redacted_too() {
    let secrets = secrets();
    let mut input = vec![0xff, 0xfe, 0x00];
    input.extend_from_slice(TOKEN.as_bytes());
    input.extend_from_slice(&[0x80, 0xc3]);
    let redacted = secrets.redact_bytes(&input);
    assert_eq!(redacted.bytes.len(), input.len());
    assert_eq!(&redacted.bytes[..3], &[0xff, 0xfe, 0x00]);
    assert_eq!(&redacted.bytes[redacted.bytes.len() - 2..], &[0x80, 0xc3]);
    assert!(!contains(&redacted.bytes, TOKEN.as_bytes()));
    assert_eq!(redacted.labels, ["daemon token"]);
}

#[test]
fn a_stream_split_in_two_anywhere_matches_the_whole_redaction() {
    let secrets = secrets();
    let input = format!("out: {TOKEN}|{KEY}{TOKEN} end").into_bytes();
    let whole = secrets.redact_bytes(&input);
    for cut in 0..=input.len() {
        let (output, labels) = stream(&secrets, &input, &[cut]);
        assert_eq!(output, whole.bytes, "cut at {cut}");
        assert_eq!(labels, whole.labels, "cut at {cut}");
    }
}

#[test]
fn a_stream_split_in_three_anywhere_never_leaks() {
    let secrets = secrets();
    let input = format!("a{TOKEN}b").into_bytes();
    let whole = secrets.redact_bytes(&input);
    for first in 0..=input.len() {
        for second in first..=input.len() {
            let (output, _) = stream(&secrets, &input, &[first, second]);
            assert_eq!(output, whole.bytes, "cuts at {first} and {second}");
        }
    }
}

#[test]
fn a_stream_in_single_bytes_is_held_back_only_while_it_could_be_a_secret() {
    let secrets = secrets();
    let mut redactor = secrets.stream();
    // Ordinary output passes straight through.
    assert_eq!(redactor.push(b"hello "), b"hello ");
    // The start of the token is held back, byte by byte...
    let mut released = Vec::new();
    for byte in TOKEN.as_bytes() {
        released.extend(redactor.push(&[*byte]));
    }
    assert!(!contains(&released, b"tok_"), "nothing of the token is published before it is known");
    // ...and a prefix that turns out not to be a secret is released unchanged.
    released.extend(redactor.push(b" tok_3f"));
    released.extend(redactor.push(b"!"));
    assert!(released.ends_with(b" tok_3f!"));
    assert_eq!(redactor.held_len(), 0);
    released.extend(redactor.finish());
    assert_eq!(released.len(), TOKEN.len() + 8);
    assert_eq!(redactor.labels(), ["daemon token"]);
}

#[test]
fn overlapping_prefixes_and_overlapping_secrets_are_masked_whole() {
    let secrets = Secrets::new();
    // The second secret starts where the first one ends, and a third shares a long prefix with the first.
    assert!(secrets.set("first", "abcdefghXYZ".to_owned()));
    assert!(secrets.set("second", "XYZ12345678".to_owned()));
    assert!(secrets.set("third", "abcdefgh0000".to_owned()));
    let input = b"..abcdefgh abcdefghXYZ12345678 abcdefgh0000 abcabcdefghXYZ..".to_vec();
    let whole = secrets.redact_bytes(&input);
    assert_eq!(whole.bytes.len(), input.len());
    for secret in ["abcdefghXYZ", "XYZ12345678", "abcdefgh0000", "12345678", "abcdefghX"] {
        assert!(!contains(&whole.bytes, secret.as_bytes()), "{secret} is masked");
    }
    assert!(whole.bytes.starts_with(b"..abcdefgh "), "a mere prefix is left alone");
    assert_eq!(whole.labels, ["first", "second", "third"]);
    for cut in 0..=input.len() {
        for second in (cut..=input.len()).step_by(3) {
            assert_eq!(stream(&secrets, &input, &[cut, second]).0, whole.bytes, "cuts at {cut}, {second}");
        }
    }
}

#[test]
fn a_repeating_secret_overlapping_itself_is_masked() {
    let secrets = Secrets::new();
    assert!(secrets.set("repeat", "aaaaaaaa".to_owned()));
    let input = b"xaaaaaaaaaaay".to_vec();
    let whole = secrets.redact_bytes(&input);
    assert_eq!(whole.bytes, b"x***********y");
    for cut in 0..=input.len() {
        assert_eq!(stream(&secrets, &input, &[cut]).0, whole.bytes, "cut at {cut}");
    }
}

#[test]
fn a_redactor_keeps_the_secrets_it_started_with() {
    let secrets = secrets();
    let mut redactor = secrets.stream();
    secrets.remove("daemon token");
    let mut output = redactor.push(TOKEN.as_bytes());
    output.extend(redactor.finish());
    assert!(!contains(&output, TOKEN.as_bytes()));
}

#[test]
fn random_streams_over_a_small_alphabet_always_match_the_whole_redaction() {
    let secrets = Secrets::new();
    assert!(secrets.set("one", "abababab".to_owned()));
    assert!(secrets.set("two", "babbabba".to_owned()));
    assert!(secrets.set("three", "aabbaabbab".to_owned()));
    // A small deterministic generator: no dependency, same cases every run.
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = move |bound: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        usize::try_from(state % bound as u64).expect("fits")
    };
    for _ in 0..2000 {
        let length = next(40);
        let input: Vec<u8> = (0..length).map(|_| if next(2) == 0 { b'a' } else { b'b' }).collect();
        let whole = secrets.redact_bytes(&input);
        for secret in ["abababab", "babbabba", "aabbaabbab"] {
            assert!(!contains(&whole.bytes, secret.as_bytes()));
        }
        let mut cuts: Vec<usize> = (0..next(5)).map(|_| next(length + 1)).collect();
        cuts.sort_unstable();
        let (output, labels) = stream(&secrets, &input, &cuts);
        assert_eq!(output, whole.bytes, "input {:?}, cuts {cuts:?}", String::from_utf8_lossy(&input));
        assert_eq!(labels.len(), whole.labels.len());
    }
}

/// The daemon's own cuts (`…`) must not leave a secret readable in pieces: a long `search` line cut one character
/// into a token, and a command's output whose elided middle split a token between its kept head and tail.
#[test]
fn pieces_of_a_secret_beside_the_daemons_cuts_are_masked() {
    let token = "SiXfBk4Dog0jrPmbTEdlkcbk4Wry4gAQ2LMFHzcb7Yq";
    let secrets = Secrets::new();
    secrets.set("daemon token", token.to_owned());

    let cut_line = format!("TOKEN={}…", &token[..token.len() - 1]);
    let redacted = secrets.redact(&cut_line);
    assert!(!redacted.text.contains(&token[..12]), "{}", redacted.text);
    assert_eq!(redacted.labels, ["daemon token"]);
    assert_eq!(redacted.text.len(), cut_line.len(), "same length");

    let elided = format!("head {}…[14464 bytes elided]…{} tail", &token[..20], &token[20..]);
    let redacted = secrets.redact(&elided);
    assert!(!redacted.text.contains(&token[..8]) && !redacted.text.contains(&token[30..]), "{}", redacted.text);
    assert!(redacted.text.starts_with("head ") && redacted.text.ends_with(" tail"), "{}", redacted.text);

    // Text that merely sits beside an ellipsis, and pieces too short to tell anything, are left alone.
    let ordinary = format!("and so on… {}…", &token[..7]);
    assert_eq!(secrets.redact(&ordinary).text, ordinary);
}
