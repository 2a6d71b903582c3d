//! Splitting an OVSDB byte stream into JSON-RPC messages. OVSDB (RFC 7047) sends JSON objects back
//! to back with no delimiter, so the decoder tracks brace depth outside of strings (honouring
//! escapes) and yields each complete top-level object, whatever the read boundaries were. Owns only
//! its buffer; never panics on any input.

use thiserror::Error;

/// Largest message accepted (an initial SB snapshot at 100k ports is well under this).
pub const DEFAULT_MAX_MESSAGE: usize = 512 * 1024 * 1024;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum FramingError {
    #[error("unexpected byte {byte:#04x} between messages (expected '{{')")]
    Garbage { byte: u8 },
    #[error("message exceeds {limit} bytes")]
    TooLarge { limit: usize },
    #[error("unbalanced '}}' in message")]
    Unbalanced,
}

/// Incremental splitter: [`Self::feed`] bytes as they arrive, then take messages with
/// [`Self::next_message`]. After an error the stream is unusable (the connection must be dropped).
#[derive(Debug)]
pub struct Decoder {
    buffer: Vec<u8>,
    /// Bytes at the front of `buffer` already returned (or skipped); dropped on the next feed, so
    /// taking many coalesced messages costs one compaction, not one per message.
    head: usize,
    /// Bytes of `buffer` already scanned (the state below describes `buffer[..scanned]`).
    scanned: usize,
    /// Where the current message starts in `buffer`, once its '{' was seen.
    start: Option<usize>,
    depth: usize,
    in_string: bool,
    escaped: bool,
    max_message: usize,
    failed: Option<FramingError>,
}

/// A buffer larger than this is shrunk once its message is taken.
const SHRINK_ABOVE: usize = 1 << 20;
/// The capacity a shrunk buffer keeps.
const KEPT_CAPACITY: usize = 1 << 16;

impl Default for Decoder {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_MESSAGE)
    }
}

impl Decoder {
    #[must_use]
    pub fn new(max_message: usize) -> Self {
        Self {
            buffer: Vec::new(),
            head: 0,
            scanned: 0,
            start: None,
            depth: 0,
            in_string: false,
            escaped: false,
            max_message,
            failed: None,
        }
    }

    /// Appends received bytes.
    pub fn feed(&mut self, bytes: &[u8]) {
        if self.head > 0 {
            self.buffer.drain(..self.head);
            self.scanned -= self.head;
            self.start = self.start.map(|start| start - self.head);
            self.head = 0;
        }
        self.buffer.extend_from_slice(bytes);
    }

    /// After a large message (the snapshot): returns the buffer's capacity beyond
    /// [`KEPT_CAPACITY`] once little is pending, instead of keeping the largest message's size
    /// for the connection's life (27 MiB at 10,000 ports). Small messages never shrink it.
    fn give_back_capacity(&mut self) {
        if self.buffer.capacity() > SHRINK_ABOVE && self.pending_bytes() < KEPT_CAPACITY {
            self.buffer.drain(..self.head);
            self.scanned -= self.head;
            self.head = 0;
            self.buffer.shrink_to(KEPT_CAPACITY);
        }
    }

    /// Bytes buffered but not yet returned as a message.
    #[must_use]
    pub fn pending_bytes(&self) -> usize {
        self.buffer.len() - self.head
    }

    /// The next complete message (the raw bytes of one JSON object), `Ok(None)` if more input is
    /// needed.
    pub fn next_message(&mut self) -> Result<Option<Vec<u8>>, FramingError> {
        if let Some(error) = &self.failed {
            return Err(error.clone());
        }
        while self.scanned < self.buffer.len() {
            let byte = self.buffer[self.scanned];
            let position = self.scanned;
            self.scanned += 1;
            if self.start.is_none() {
                match byte {
                    b' ' | b'\t' | b'\r' | b'\n' => continue,
                    b'{' => {
                        self.start = Some(position);
                        self.depth = 1;
                        continue;
                    }
                    _ => return Err(self.fail(FramingError::Garbage { byte })),
                }
            }
            if self.in_string {
                if self.escaped {
                    self.escaped = false;
                } else if byte == b'\\' {
                    self.escaped = true;
                } else if byte == b'"' {
                    self.in_string = false;
                }
                continue;
            }
            match byte {
                b'"' => self.in_string = true,
                b'{' | b'[' => self.depth += 1,
                b'}' | b']' => {
                    self.depth = match self.depth.checked_sub(1) {
                        Some(depth) => depth,
                        None => return Err(self.fail(FramingError::Unbalanced)),
                    };
                    if self.depth == 0 {
                        if byte != b'}' {
                            return Err(self.fail(FramingError::Unbalanced));
                        }
                        let start = self.start.take().unwrap_or(0);
                        let message = self.buffer[start..self.scanned].to_vec();
                        self.head = self.scanned;
                        self.give_back_capacity();
                        return Ok(Some(message));
                    }
                }
                _ => {}
            }
        }
        let current = self.start.map_or(0, |start| self.buffer.len() - start);
        if current > self.max_message {
            return Err(self.fail(FramingError::TooLarge {
                limit: self.max_message,
            }));
        }
        // Scanned whitespace between messages is consumed, so an idle stream does not grow.
        if self.start.is_none() {
            self.head = self.scanned;
        }
        Ok(None)
    }

    fn fail(&mut self, error: FramingError) -> FramingError {
        self.failed = Some(error.clone());
        error
    }
}

impl Clone for FramingError {
    fn clone(&self) -> Self {
        match self {
            Self::Garbage { byte } => Self::Garbage { byte: *byte },
            Self::TooLarge { limit } => Self::TooLarge { limit: *limit },
            Self::Unbalanced => Self::Unbalanced,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_messages(decoder: &mut Decoder) -> Vec<String> {
        let mut out = Vec::new();
        while let Some(message) = decoder.next_message().unwrap() {
            out.push(String::from_utf8(message).unwrap());
        }
        out
    }

    const STREAM: &str = r#"{"id":1,"result":{"a":"}{\"]"}} {"method":"echo","params":[],"id":"echo"}
{"id":null,"method":"update3","params":["m","x",{"T":{"u":{"insert":{"s":"\\"}}}}]}"#;

    #[test]
    fn coalesced_messages_are_split() {
        let mut decoder = Decoder::default();
        decoder.feed(STREAM.as_bytes());
        let messages = all_messages(&mut decoder);
        assert_eq!(messages.len(), 3);
        for message in &messages {
            serde_json::from_str::<serde_json::Value>(message).unwrap();
        }
        assert!(messages[0].contains(r#"}{\"]"#));
        assert_eq!(decoder.pending_bytes(), 0);
    }

    #[test]
    fn every_split_point_gives_the_same_messages() {
        let mut whole = Decoder::default();
        whole.feed(STREAM.as_bytes());
        let expected = all_messages(&mut whole);
        let bytes = STREAM.as_bytes();
        for cut in 0..=bytes.len() {
            let mut decoder = Decoder::default();
            decoder.feed(&bytes[..cut]);
            let mut got = all_messages(&mut decoder);
            decoder.feed(&bytes[cut..]);
            got.extend(all_messages(&mut decoder));
            assert_eq!(got, expected, "split at {cut}");
        }
    }

    #[test]
    fn a_large_message_leaves_no_large_buffer_behind() {
        let mut decoder = Decoder::default();
        let large = format!("{{\"result\":\"{}\"}}", "x".repeat(3 << 20));
        // The large message and the start of the next one arrive together.
        decoder.feed(large.as_bytes());
        decoder.feed(b"{\"id\":");
        assert_eq!(decoder.next_message().unwrap().unwrap().len(), large.len());
        assert!(
            decoder.buffer.capacity() <= KEPT_CAPACITY,
            "{} bytes kept",
            decoder.buffer.capacity()
        );
        // The pending part survived the shrink.
        decoder.feed(b"2}");
        assert_eq!(decoder.next_message().unwrap().unwrap(), b"{\"id\":2}");
        // Small messages do not make it shrink (nor grow) again and again.
        for _ in 0..3 {
            decoder.feed(b"{\"id\":3}");
            assert!(decoder.next_message().unwrap().is_some());
        }
    }

    #[test]
    fn byte_by_byte_feeding_works() {
        let mut decoder = Decoder::default();
        let mut got = Vec::new();
        for byte in STREAM.as_bytes() {
            decoder.feed(&[*byte]);
            got.extend(all_messages(&mut decoder));
        }
        assert_eq!(got.len(), 3);
    }

    #[test]
    fn garbage_between_messages_is_an_error_that_sticks() {
        let mut decoder = Decoder::default();
        decoder.feed(b"{\"id\":1} xyz");
        assert!(decoder.next_message().unwrap().is_some());
        assert_eq!(
            decoder.next_message(),
            Err(FramingError::Garbage { byte: b'x' })
        );
        decoder.feed(b"{}");
        assert!(decoder.next_message().is_err());
    }

    #[test]
    fn oversized_and_unbalanced_messages_are_rejected() {
        let mut decoder = Decoder::new(16);
        decoder.feed(b"{\"a\":\"0123456789abcdef\"");
        assert_eq!(
            decoder.next_message(),
            Err(FramingError::TooLarge { limit: 16 })
        );
        let mut decoder = Decoder::default();
        decoder.feed(b"{]}");
        assert_eq!(decoder.next_message(), Err(FramingError::Unbalanced));
    }

    #[test]
    fn idle_whitespace_does_not_accumulate() {
        let mut decoder = Decoder::default();
        decoder.feed(b"   \n\n  ");
        assert_eq!(decoder.next_message(), Ok(None));
        assert_eq!(decoder.pending_bytes(), 0);
    }
}
