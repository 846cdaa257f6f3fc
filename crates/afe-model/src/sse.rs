//! Server-sent events as OpenAI-compatible endpoints stream them: lines of `field: value`, an event
//! ended by a blank line, `data:` lines of one event joined by newlines, `:` lines (keep-alive
//! comments) skipped, `\r\n` and `\n` alike. Pure: bytes in, whole events out, whatever the
//! boundaries the bytes arrived at.

/// Collects bytes into events.
#[derive(Debug, Default)]
pub struct SseDecoder {
    /// Bytes of a line not ended yet.
    pending: Vec<u8>,
    /// The `data` lines of the event being read.
    data: Vec<String>,
}

impl SseDecoder {
    /// Takes the next bytes; returns the data of every event they completed, in order.
    pub fn push(&mut self, bytes: &[u8]) -> Vec<String> {
        let mut events = Vec::new();
        self.pending.extend_from_slice(bytes);
        while let Some(end) = self.pending.iter().position(|b| *b == b'\n') {
            let mut line: Vec<u8> = self.pending.drain(..=end).collect();
            line.pop();
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            self.line(&String::from_utf8_lossy(&line), &mut events);
        }
        events
    }

    /// The stream ended: an event whose blank line never came is complete all the same.
    pub fn finish(&mut self) -> Vec<String> {
        let mut events = Vec::new();
        if !self.pending.is_empty() {
            let line = String::from_utf8_lossy(&std::mem::take(&mut self.pending)).into_owned();
            self.line(line.trim_end_matches('\r'), &mut events);
        }
        self.line("", &mut events);
        events
    }

    fn line(&mut self, line: &str, events: &mut Vec<String>) {
        if line.is_empty() {
            if !self.data.is_empty() {
                events.push(std::mem::take(&mut self.data).join("\n"));
            }
            return;
        }
        if line.starts_with(':') {
            return;
        }
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        // One space after the colon is part of the syntax, not of the value.
        let value = value.strip_prefix(' ').unwrap_or(value);
        if field == "data" {
            self.data.push(value.to_string());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(stream: &[u8], cut_every: usize) -> Vec<String> {
        let mut decoder = SseDecoder::default();
        let mut events = Vec::new();
        for piece in stream.chunks(cut_every.max(1)) {
            events.extend(decoder.push(piece));
        }
        events.extend(decoder.finish());
        events
    }

    #[test]
    fn events_come_out_whole_whatever_the_boundaries() {
        let stream = b": OPENROUTER PROCESSING\n\ndata: {\"a\":1}\n\ndata: {\"b\":\r\ndata: 2}\r\n\r\nevent: x\nid: 7\ndata: [DONE]\n\n";
        let expected = vec![
            "{\"a\":1}".to_string(),
            "{\"b\":\n2}".to_string(),
            "[DONE]".to_string(),
        ];
        for cut in 1..stream.len() {
            assert_eq!(all(stream, cut), expected, "cut every {cut} bytes");
        }
    }

    #[test]
    fn a_last_event_without_its_blank_line_still_counts() {
        assert_eq!(all(b"data: {\"x\":1}", 3), ["{\"x\":1}"]);
        assert_eq!(all(b"data:no-space\n\n", 100), ["no-space"]);
        assert!(all(b": only a comment\n\n", 4).is_empty());
    }
}
