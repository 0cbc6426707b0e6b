package sessionmcp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"syscall"
	"time"
)

// What the guard enforces on a server a client named, and why:
//
//   - It follows no redirect. The headers (the client's credentials) are
//     sent with every request, so a redirect would hand them to another
//     host, and the host check would be void.
//   - It dials no loopback, link-local (169.254.0.0/16 and fe80::/10,
//     where clouds serve instance metadata and credentials), unspecified,
//     multicast or broadcast address, nor the clouds' other metadata
//     addresses, unless the operator listed that very address: a listed
//     name whose DNS answers such an address (a rebinding attack, or a
//     stale record) must not reach mspd's own host or its cloud
//     credentials. The check runs on the address actually dialled, after
//     resolution, for every connection, so a name that changes its answer
//     between two connections is caught too. Private addresses (10/8,
//     192.168/16, fc00::/7, …) are allowed: listing an internal host is
//     the operator's choice.
//   - It ignores the environment's HTTP proxy: the address dialled must
//     be the server's for the check to mean anything.

// metadata are the cloud metadata addresses outside the link-local
// ranges.
var metadata = []netip.Addr{
	netip.MustParseAddr("fd00:ec2::254"),   // AWS, over IPv6
	netip.MustParseAddr("100.100.100.200"), // Alibaba Cloud
	netip.MustParseAddr("168.63.129.16"),   // Azure's host endpoint
}

// forbidden tells whether a server named by a client may not be dialled at
// a, when the operator listed its host by name.
func forbidden(a netip.Addr) bool {
	a = a.Unmap()
	return a.IsLoopback() || a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() || a.IsInterfaceLocalMulticast() ||
		a.IsMulticast() || a.IsUnspecified() || a == netip.AddrFrom4([4]byte{255, 255, 255, 255}) ||
		a.Is4() && a.As4()[0] == 0 || // 0.0.0.0/8: "this network"
		a.Zone() != "" || containsAddr(metadata, a)
}

func containsAddr(list []netip.Addr, a netip.Addr) bool {
	for _, x := range list {
		if x == a {
			return true
		}
	}
	return false
}

// errRedirect refuses a redirect of a server named by a client.
var errRedirect = errors.New("the server answered with a redirect, which mspd does not follow for a server a client named")

// dialGuard vets each address dialled for a server allowed by rule: its
// own address when the operator listed one, else any address that is not
// forbidden.
func dialGuard(rule hostRule) func(network, address string, _ syscall.RawConn) error {
	return func(_, address string, _ syscall.RawConn) error {
		host, _, err := net.SplitHostPort(address)
		if err != nil {
			return err
		}
		a, err := netip.ParseAddr(host)
		if err != nil {
			return fmt.Errorf("dialling %s: not an address", host)
		}
		a = a.Unmap()
		switch {
		case rule.addr.IsValid() && a == rule.addr:
			return nil
		case rule.addr.IsValid():
			return fmt.Errorf("dialling %s: the server's listed address is %s", a, rule.addr)
		case forbidden(a):
			return fmt.Errorf("dialling %s: a loopback, link-local, metadata or otherwise special address, which a server named by a client may not reach unless the operator lists that address", a)
		}
		return nil
	}
}

// httpClient is how a server a client named is reached: no redirect, no
// proxy, and, under the HTTP mode (guarded), only the addresses dialGuard
// allows.
func httpClient(rule hostRule, guarded bool) *http.Client {
	d := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	if guarded {
		d.Control = dialGuard(rule)
	}
	t := &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return d.DialContext(ctx, network, addr)
		},
		ForceAttemptHTTP2:   true,
		MaxIdleConns:        4,
		IdleConnTimeout:     30 * time.Second,
		TLSHandshakeTimeout: 10 * time.Second,
	}
	return &http.Client{Transport: t, CheckRedirect: func(*http.Request, []*http.Request) error { return errRedirect }}
}
