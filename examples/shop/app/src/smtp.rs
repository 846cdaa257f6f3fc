//! Sends one message over plain SMTP. In the environment, the mail host resolves to the sidecar,
//! which accepts the message into the inbox and delivers nothing.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::Duration;

#[derive(Debug)]
pub struct Mail<'a> {
    pub from: &'a str,
    pub to: &'a str,
    pub subject: &'a str,
    pub body: &'a str,
}

/// Reads one reply (continuation lines `250-...` included) and checks its code.
fn expect(reader: &mut impl BufRead, code: &str) -> Result<(), String> {
    loop {
        let mut line = String::new();
        reader
            .read_line(&mut line)
            .map_err(|err| format!("reading the server's reply: {err}"))?;
        if !line.starts_with(code) {
            return Err(format!(
                "expected {code}, the server said {:?}",
                line.trim_end()
            ));
        }
        if line.as_bytes().get(3) != Some(&b'-') {
            return Ok(());
        }
    }
}

/// Lines starting with a dot get another (RFC 5321, 4.5.2), so the body cannot end the message.
fn dot_stuffed(body: &str) -> String {
    body.lines()
        .map(|line| {
            if line.starts_with('.') {
                format!(".{line}\r\n")
            } else {
                format!("{line}\r\n")
            }
        })
        .collect()
}

pub fn send(server: &str, mail: &Mail<'_>) -> Result<(), String> {
    let stream =
        TcpStream::connect(server).map_err(|err| format!("connecting to {server}: {err}"))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|err| err.to_string())?;
    let mut writer = stream.try_clone().map_err(|err| err.to_string())?;
    let mut reader = BufReader::new(stream);
    let mut say = |line: &str, reader: &mut BufReader<TcpStream>, code: &str| {
        writer
            .write_all(line.as_bytes())
            .map_err(|err| format!("writing to {server}: {err}"))?;
        expect(reader, code)
    };
    expect(&mut reader, "220")?;
    say("EHLO shop\r\n", &mut reader, "250")?;
    say(
        &format!("MAIL FROM:<{}>\r\n", mail.from),
        &mut reader,
        "250",
    )?;
    say(&format!("RCPT TO:<{}>\r\n", mail.to), &mut reader, "250")?;
    say("DATA\r\n", &mut reader, "354")?;
    let message = format!(
        "From: {}\r\nTo: {}\r\nSubject: {}\r\n\r\n{}.\r\n",
        mail.from,
        mail.to,
        mail.subject,
        dot_stuffed(mail.body)
    );
    say(&message, &mut reader, "250")?;
    say("QUIT\r\n", &mut reader, "221")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_leading_dot_is_doubled() {
        assert_eq!(dot_stuffed("a\n.b\n..c"), "a\r\n..b\r\n...c\r\n");
    }
}
