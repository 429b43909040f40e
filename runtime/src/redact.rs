//! Masking the daemon's secrets out of tool output: defence in depth behind the sandbox.
//!
//! Before a tool result is stored or sent to a model, and before live output is streamed, every occurrence of the
//! daemon token or a connected provider's API key is replaced with a marker, and which secrets were replaced is
//! recorded so the result can say so. The sandbox keeps tools away from the files holding them; this catches what
//! gets through anyway (a hard link made before the daemon started, a secret a user pasted into a project file).
//!
//! A mask has exactly the secret's length in bytes (`[redacted: daemon token]` padded with `*`, or only `*` when
//! the marker is longer than the secret), so the byte offsets of streamed output stay valid and text stays valid
//! UTF-8. Secrets shorter than [`MIN_SECRET_BYTES`] are not recorded: they would mask ordinary words.

use std::sync::{Arc, PoisonError, RwLock};

use zeroize::{Zeroize, Zeroizing};

/// Secrets shorter than this many bytes are ignored.
pub const MIN_SECRET_BYTES: usize = 8;

/// The byte the mask is padded with, and all of it when the marker does not fit.
const PAD: u8 = b'*';

/// One secret and what its mask says.
struct Secret {
    label: String,
    /// `[redacted: <label>]`, ASCII.
    marker: Vec<u8>,
    value: Zeroizing<Vec<u8>>,
}

impl Secret {
    /// The mask byte at `offset` within an occurrence of this secret.
    fn mask_byte(&self, offset: usize) -> u8 {
        if self.marker.len() <= self.value.len() { self.marker.get(offset).copied().unwrap_or(PAD) } else { PAD }
    }
}

/// The set of secrets to mask, by label: thread-safe and cheap to clone (clones share the set).
///
/// `Debug` shows the labels only; the values are zeroed when they are removed or replaced and the last
/// [`StreamRedactor`] using them is done.
#[derive(Clone, Default)]
pub struct Secrets {
    /// Replaced as a whole on every change, so a redactor can keep the set it started with.
    current: Arc<RwLock<Arc<Vec<Secret>>>>,
}

/// Text with the secrets masked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Redacted {
    pub text: String,
    /// The labels of the secrets that were masked, each once, in the order of their first occurrence.
    pub labels: Vec<String>,
}

/// Bytes with the secrets masked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RedactedBytes {
    pub bytes: Vec<u8>,
    /// The labels of the secrets that were masked, each once, in the order of their first occurrence.
    pub labels: Vec<String>,
}

impl Secrets {
    /// An empty set.
    pub fn new() -> Secrets {
        Secrets::default()
    }

    /// Records `secret` under `label` (e.g. `"daemon token"`, `"openai API key"`), replacing what that label held.
    /// Returns false, and records nothing, when the secret is shorter than [`MIN_SECRET_BYTES`]; the label's
    /// previous secret is removed either way.
    pub fn set(&self, label: impl Into<String>, secret: String) -> bool {
        let label = label.into();
        let value = Zeroizing::new(secret.into_bytes());
        let recorded = value.len() >= MIN_SECRET_BYTES;
        self.update(|secrets| {
            secrets.retain(|existing| existing.label != label);
            if recorded {
                let marker = marker(&label);
                secrets.push(Secret { label, marker, value });
            }
        });
        recorded
    }

    /// Forgets the secret recorded under `label`; returns whether there was one.
    pub fn remove(&self, label: &str) -> bool {
        let mut removed = false;
        self.update(|secrets| {
            let before = secrets.len();
            secrets.retain(|existing| existing.label != label);
            removed = secrets.len() != before;
        });
        removed
    }

    /// The labels of the recorded secrets.
    pub fn labels(&self) -> Vec<String> {
        self.snapshot().iter().map(|secret| secret.label.clone()).collect()
    }

    /// True when no secret is recorded.
    pub fn is_empty(&self) -> bool {
        self.snapshot().is_empty()
    }

    /// `text` with every occurrence of every secret masked.
    pub fn redact(&self, text: &str) -> Redacted {
        let RedactedBytes { bytes, labels } = self.redact_bytes(text.as_bytes());
        // Occurrences of a valid UTF-8 secret in valid UTF-8 text start and end on character boundaries, and the
        // masks are ASCII, so this cannot fail; the fallback only keeps the function total.
        let text =
            String::from_utf8(bytes).unwrap_or_else(|error| String::from_utf8_lossy(error.as_bytes()).into_owned());
        Redacted { text, labels }
    }

    /// `bytes` (output that need not be UTF-8) with every occurrence of every secret masked.
    pub fn redact_bytes(&self, bytes: &[u8]) -> RedactedBytes {
        let secrets = self.snapshot();
        let mut output = bytes.to_vec();
        let mut labels = Vec::new();
        mask_occurrences(&secrets, bytes, &mut output, 0, &mut labels);
        mask_cut_fragments(&secrets, &mut output, &mut labels);
        RedactedBytes { bytes: output, labels }
    }

    /// A redactor for one stream of chunks, masking the secrets recorded now.
    pub fn stream(&self) -> StreamRedactor {
        StreamRedactor::new(self)
    }

    fn snapshot(&self) -> Arc<Vec<Secret>> {
        Arc::clone(&self.current.read().unwrap_or_else(PoisonError::into_inner))
    }

    fn update(&self, change: impl FnOnce(&mut Vec<Secret>)) {
        let mut current = self.current.write().unwrap_or_else(PoisonError::into_inner);
        let mut secrets: Vec<Secret> = current
            .iter()
            .map(|secret| Secret {
                label: secret.label.clone(),
                marker: secret.marker.clone(),
                value: secret.value.clone(),
            })
            .collect();
        change(&mut secrets);
        *current = Arc::new(secrets);
    }
}

impl std::fmt::Debug for Secrets {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("Secrets").field("labels", &self.labels()).finish()
    }
}

/// Masks a stream of byte chunks (live output, where a secret may be split across chunks) with the same masks
/// as [`Secrets::redact_bytes`]. What [`StreamRedactor::push`] returns is safe to publish at once; a tail that
/// could be the start of a secret is held back until the next chunk shows whether it is. Everything pushed
/// comes out exactly once, same length, so offsets into the stream stay valid.
pub struct StreamRedactor {
    secrets: Arc<Vec<Secret>>,
    /// Bytes received but not yet returned, as received.
    held: Vec<u8>,
    /// Masks already decided for the first bytes of `held`, from occurrences that began in returned output.
    carry: Vec<u8>,
    labels: Vec<String>,
}

impl StreamRedactor {
    /// A redactor masking the secrets `secrets` holds now.
    pub fn new(secrets: &Secrets) -> StreamRedactor {
        StreamRedactor { secrets: secrets.snapshot(), held: Vec::new(), carry: Vec::new(), labels: Vec::new() }
    }

    /// Takes the next chunk and returns the bytes that are now safe to publish (possibly none, possibly some of
    /// earlier chunks).
    pub fn push(&mut self, chunk: &[u8]) -> Vec<u8> {
        self.held.extend_from_slice(chunk);
        self.release(false)
    }

    /// Returns everything still held back: the stream has ended.
    pub fn finish(&mut self) -> Vec<u8> {
        self.release(true)
    }

    /// How many bytes are held back, waiting for the next chunk.
    pub fn held_len(&self) -> usize {
        self.held.len()
    }

    /// The labels of the secrets masked so far, each once, in the order of their first occurrence.
    pub fn labels(&self) -> &[String] {
        &self.labels
    }

    fn release(&mut self, all: bool) -> Vec<u8> {
        let mut output = self.held.clone();
        output[..self.carry.len()].copy_from_slice(&self.carry);
        let found_end = mask_occurrences(&self.secrets, &self.held, &mut output, self.carry.len(), &mut self.labels);
        let masked_end = found_end.max(self.carry.len());
        // Every occurrence that covers a byte before `ready` has been seen whole: one still arriving would start
        // at a tail that is a proper prefix of a secret, and `ready` is the earliest such tail.
        let ready = if all { self.held.len() } else { self.undecided_from() };
        // Masks already decided for bytes held back, by occurrences that start in what is returned now.
        self.carry = output.get(ready..masked_end).map(<[u8]>::to_vec).unwrap_or_default();
        output.truncate(ready);
        let rest = self.held.split_off(ready);
        self.held.zeroize();
        self.held = rest;
        output
    }

    /// Where the earliest tail of `held` starts that is a proper prefix of some secret; `held.len()` if none.
    fn undecided_from(&self) -> usize {
        let length = self.held.len();
        let longest = self.secrets.iter().map(|secret| secret.value.len()).max().unwrap_or(0);
        (length.saturating_sub(longest.saturating_sub(1))..length)
            .find(|&start| {
                let tail = &self.held[start..];
                self.secrets.iter().any(|secret| tail.len() < secret.value.len() && secret.value.starts_with(tail))
            })
            .unwrap_or(length)
    }
}

impl Drop for StreamRedactor {
    fn drop(&mut self) {
        self.held.zeroize();
    }
}

impl std::fmt::Debug for StreamRedactor {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("StreamRedactor").field("held", &self.held.len()).field("labels", &self.labels).finish()
    }
}

/// `[redacted: <label>]`, with anything but printable ASCII in the label replaced by `_`.
fn marker(label: &str) -> Vec<u8> {
    let label: String = label.chars().map(|c| if c.is_ascii_graphic() || c == ' ' { c } else { '_' }).collect();
    format!("[redacted: {label}]").into_bytes()
}

/// Writes the mask of every occurrence of every secret in `input` into `output` (the same length), leaving the
/// first `keep` bytes of `output` as they are. Overlapping occurrences are masked as their union, each byte once.
/// Records the labels found in `labels` (each once) and returns the end of the last masked byte (0 if none).
fn mask_occurrences(
    secrets: &[Secret],
    input: &[u8],
    output: &mut [u8],
    keep: usize,
    labels: &mut Vec<String>,
) -> usize {
    let mut occurrences: Vec<(usize, usize)> = Vec::new();
    for (position, secret) in secrets.iter().enumerate() {
        occurrences.extend(find_all(input, &secret.value).map(|start| (start, position)));
    }
    occurrences.sort_unstable();
    let mut masked_until = keep;
    let mut masked_end = 0;
    for (start, position) in occurrences {
        let secret = &secrets[position];
        let end = start + secret.value.len();
        for (index, byte) in output.iter_mut().enumerate().take(end).skip(masked_until.max(start)) {
            *byte = secret.mask_byte(index - start);
        }
        masked_until = masked_until.max(end);
        masked_end = masked_end.max(end);
        if !labels.contains(&secret.label) {
            labels.push(secret.label.clone());
        }
    }
    masked_end
}

/// Where the daemon cut text it shows (a long line of `search`, the elided middle of a command's output, ...), it
/// marks the cut with `…`; no secret contains it.
const CUT_MARK: &[u8] = "…".as_bytes();

/// The shortest piece of a secret masked beside a cut.
const MIN_FRAGMENT_BYTES: usize = 8;

/// Masks the pieces of secrets that the daemon's own cuts left beside a `…`: a secret's beginning just before one
/// (the rest was cut off) and its end just after one (a shell output's kept tail starts there). Whole occurrences
/// are masked already; without this, a token straddling a cut came out in two halves, or with one character cut.
/// Pieces shorter than [`MIN_FRAGMENT_BYTES`] are left: they would mask ordinary text and tell next to nothing.
fn mask_cut_fragments(secrets: &[Secret], output: &mut [u8], labels: &mut Vec<String>) {
    if secrets.is_empty() {
        return;
    }
    let cuts: Vec<usize> = find_all(output, CUT_MARK).collect();
    for cut in cuts {
        let after = cut + CUT_MARK.len();
        for secret in secrets {
            let value = &secret.value[..];
            let longest = value.len().saturating_sub(1);
            let before = (MIN_FRAGMENT_BYTES..=longest.min(cut))
                .rev()
                .find(|&length| output[cut - length..cut] == value[..length]);
            let behind = (MIN_FRAGMENT_BYTES..=longest.min(output.len() - after))
                .rev()
                .find(|&length| output[after..after + length] == value[value.len() - length..]);
            for (start, length) in [before.map(|length| (cut - length, length)), behind.map(|length| (after, length))]
                .into_iter()
                .flatten()
            {
                output[start..start + length].fill(PAD);
                if !labels.contains(&secret.label) {
                    labels.push(secret.label.clone());
                }
            }
        }
    }
}

/// Every start of `needle` (not empty) in `haystack`, overlapping ones included.
fn find_all<'a>(haystack: &'a [u8], needle: &'a [u8]) -> impl Iterator<Item = usize> + 'a {
    haystack
        .windows(needle.len().max(1))
        .enumerate()
        .filter(move |(_, window)| !needle.is_empty() && *window == needle)
        .map(|(start, _)| start)
}
