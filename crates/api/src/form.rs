//! `application/x-www-form-urlencoded` pairs (query strings and form bodies), read exactly as
//! `form_urlencoded::parse` reads them but borrowed from the input wherever decoding changes
//! nothing: a `/d` query such as `dn=www.example.com&ip=1.0.1.7` then costs one pass over its
//! bytes, where the general decoder spent more instructions than the rest of the answer
//! (percent-decoding, `+` replacement and a lossy UTF-8 pass per key and value).

use std::borrow::Cow;

/// The `(key, value)` pairs of `input`, in order; empty sequences between `&`s are skipped.
/// Bytes that are not UTF-8 (a form body can hold any) are read as `form_urlencoded` reads them.
pub(crate) fn parse(input: &[u8]) -> Pairs<'_> {
    match std::str::from_utf8(input) {
        Ok(text) => Pairs::Text(text),
        Err(_) => Pairs::Bytes(form_urlencoded::parse(input)),
    }
}

/// The pairs of a query string: [`parse`] without the UTF-8 check, which the URI's parser
/// has made.
pub(crate) fn query(query: Option<&str>) -> Pairs<'_> {
    Pairs::Text(query.unwrap_or(""))
}

/// The iterator of [`parse`].
#[derive(Clone)]
pub(crate) enum Pairs<'a> {
    /// The rest of a UTF-8 input.
    Text(&'a str),
    Bytes(form_urlencoded::Parse<'a>),
}

impl<'a> Iterator for Pairs<'a> {
    type Item = (Cow<'a, str>, Cow<'a, str>);

    fn next(&mut self) -> Option<Self::Item> {
        let input = match self {
            Self::Text(input) => input,
            Self::Bytes(parse) => return parse.next(),
        };
        loop {
            if input.is_empty() {
                return None;
            }
            // One pass over the sequence: where it ends, where its name ends, and whether the
            // name or the value holds anything to decode. Every byte looked for is ASCII and
            // at most `=`, so letters (most of a query) are passed over by one comparison, and
            // each position found is a character boundary. (Indexed, with `decode`'s borrowed
            // case inline: the pairs of a usual `/d` query cost about 660 instructions this
            // way against 980 with an iterator loop and `decode` out of line, and more with
            // `memchr`, whose vector searches cost more to set up than these bytes take.)
            let bytes = input.as_bytes();
            let (mut end, mut equals) = (0, usize::MAX);
            let mut coded = [false; 2];
            while end < bytes.len() {
                let b = bytes[end];
                if b <= b'=' {
                    if b == b'&' {
                        break;
                    }
                    if b == b'=' && equals == usize::MAX {
                        equals = end;
                    } else if b == b'+' || b == b'%' {
                        coded[usize::from(equals != usize::MAX)] = true;
                    }
                }
                end += 1;
            }
            let (sequence, rest) = input.split_at(end);
            *input = rest.get(1..).unwrap_or("");
            if sequence.is_empty() {
                continue;
            }
            let (name, value) =
                if equals < end { (&sequence[..equals], &sequence[equals + 1..]) } else { (sequence, "") };
            return Some((decode(name, coded[0]), decode(value, coded[1])));
        }
    }
}

/// One key or value: `+` is a space, `%XX` a byte, and the bytes are read as UTF-8 with
/// invalid sequences replaced. Borrowed when it holds neither (`coded` is false), inline: that
/// is every key and value of a usual query.
#[inline]
fn decode(input: &str, coded: bool) -> Cow<'_, str> {
    if coded {
        Cow::Owned(decoded(input))
    } else {
        Cow::Borrowed(input)
    }
}

#[cold]
fn decoded(input: &str) -> String {
    let spaced: Vec<u8> = input.bytes().map(|b| if b == b'+' { b' ' } else { b }).collect();
    percent_encoding::percent_decode(&spaced).decode_utf8_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    fn both(input: &[u8]) {
        let ours: Vec<_> = super::parse(input).collect();
        let theirs: Vec<_> = form_urlencoded::parse(input).collect();
        assert_eq!(ours, theirs, "{:?}", String::from_utf8_lossy(input));
    }

    #[test]
    fn reads_as_form_urlencoded_does() {
        for input in [
            "",
            "&",
            "&&a=1&&",
            "dn=www.example.com&ip=1.0.1.7&ttl=1",
            "dn=a.com,b.com;1700000000&query=1",
            "a=b=c",
            "=x",
            "k",
            "k=",
            "a+b=c+d",
            "dn=%77ww.example.com",
            "bad=%zz%4",
            "utf=%E4%B8%AD%E6%96%87",
            "torn=%E4%B8",
            "中文=値",
        ] {
            both(input.as_bytes());
        }
        both(b"raw=\xff\xfe&ok=1");
    }

    #[test]
    fn plain_pairs_are_borrowed() {
        let pairs: Vec<_> = super::parse(b"dn=www.example.com&ip=1.0.1.7").collect();
        assert!(pairs
            .iter()
            .all(|(k, v)| matches!(k, std::borrow::Cow::Borrowed(_))
                && matches!(v, std::borrow::Cow::Borrowed(_))));
    }

    proptest! {
        #[test]
        fn any_bytes_read_as_form_urlencoded_does(input in proptest::collection::vec(
            prop_oneof![Just(b'&'), Just(b'='), Just(b'+'), Just(b'%'), Just(b'a'), Just(b'F'), Just(b'4'), any::<u8>()],
            0..40,
        )) {
            both(&input);
        }

        #[test]
        fn any_text_reads_as_form_urlencoded_does(input in "[&=+%a-fA-F0-9中é ]{0,40}") {
            both(input.as_bytes());
        }
    }
}
