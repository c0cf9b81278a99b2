//! What TLS failures mean to both server drivers, PostgreSQL's and
//! MySQL's: which connect errors are refusals that retrying with the same
//! settings cannot cure (so the driver stops rather than retrying for
//! ever), and how their messages name the URL.

/// True when `err` (a connect error) is a TLS refusal that retrying with
/// the same settings cannot cure: a certificate the checks refused, or a
/// server without TLS under `require` or stronger.
pub(crate) fn is_refusal(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(err);
    while let Some(e) = cause {
        // An `io::Error` (tokio-rustls's) hides what it wraps from
        // `source()`: look inside.
        let inner = e
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            .map(|inner| inner as &(dyn std::error::Error + 'static));
        if let Some(rustls) = inner
            .unwrap_or(e)
            .downcast_ref::<rustls::Error>()
            .or_else(|| e.downcast_ref::<rustls::Error>())
        {
            return matches!(
                rustls,
                rustls::Error::InvalidCertificate(_)
                    | rustls::Error::NoCertificatesPresented
                    | rustls::Error::UnsupportedNameType
                    | rustls::Error::General(_)
                    | rustls::Error::AlertReceived(_)
                    | rustls::Error::PeerIncompatible(_)
            );
        }
        if e.to_string() == "server does not support TLS" {
            return true;
        }
        cause = e.source();
    }
    false
}

/// ` at URL` for a message, or nothing when the URL is not known where
/// the error was met (a driver's later connection: the CLI adds it).
pub(crate) fn at_url(url: &str) -> String {
    if url.is_empty() {
        String::new()
    } else {
        format!(" at {url}")
    }
}
