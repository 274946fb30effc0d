package config

import "net"

// UI configures the web page that annexctl ui opens.
type UI struct {
	// Listen is the address the page listens on once asked; empty:
	// 127.0.0.1 on a free port. Beyond loopback the page is served over
	// TLS with the hub's certificate (hub.tls_cert, hub.tls_key), and
	// only then.
	Listen string `toml:"listen"`
}

// validate refuses a page beyond loopback without TLS.
func (u UI) validate(c *Config) error {
	if u.Listen == "" {
		return nil
	}
	host, _, err := net.SplitHostPort(u.Listen)
	if err != nil {
		return c.invalid("ui.listen", u.Listen, `host:port, such as "127.0.0.1:0"`)
	}
	if !loopback(host) && (c.Hub.TLSCert == "" || c.Hub.TLSKey == "") {
		return c.invalid("ui.listen", u.Listen,
			"a loopback address (such as 127.0.0.1:0), or hub.tls_cert and hub.tls_key set: beyond this machine the page is served only over TLS")
	}
	return nil
}
