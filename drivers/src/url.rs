//! Taking a driver's own parameters out of a connection URL's query,
//! shared by the PostgreSQL and MySQL drivers.

/// `scheme://…?a=1&b=2` → (`scheme://…?a=1`, the pairs whose key `take`
/// accepts, here `b`, values percent-decoded): a driver's own parameters
/// taken out before its client library reads the URL (PostgreSQL's
/// `picolease_*` and TLS keys, MySQL's TLS keys).
pub(crate) fn split_query(
    url: &str,
    take: impl Fn(&str) -> bool,
) -> (String, Vec<(String, String)>) {
    let Some((base, query)) = url.split_once('?') else {
        return (url.to_string(), Vec::new());
    };
    let mut kept = Vec::new();
    let mut own = Vec::new();
    for pair in query.split('&') {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        if take(key) {
            own.push((key.to_string(), percent_decode(value)));
        } else if !pair.is_empty() {
            kept.push(pair);
        }
    }
    let rest = if kept.is_empty() {
        base.to_string()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    (rest, own)
}

/// Decodes `%XX` escapes (and leaves anything else, a stray `%` included,
/// as it is).
pub(crate) fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = (bytes[i] == b'%')
            .then(|| text.get(i + 1..i + 3))
            .flatten()
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match escaped {
            Some(byte) => {
                out.push(byte);
                i += 3;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_decoding_keeps_stray_percent_signs() {
        assert_eq!(percent_decode("a%2Fb%zz%4"), "a/b%zz%4");
    }

    #[test]
    fn taken_pairs_leave_the_url_decoded_and_the_rest_stays_as_written() {
        let (rest, taken) = split_query("mysql://u@h/db?ssl-ca=%2Fa%20b.pem&x=%41", |k| {
            k == "ssl-ca"
        });
        assert_eq!(rest, "mysql://u@h/db?x=%41");
        assert_eq!(taken, vec![("ssl-ca".to_string(), "/a b.pem".to_string())]);
    }
}
