package sqlite

import (
	"path/filepath"
	"testing"
)

// TestReadCache: every read connection has the page cache asked for
// (DefaultReadCacheKiB unless WithReadCache says otherwise), so the memory
// reads may keep is what the package says.
func TestReadCache(t *testing.T) {
	for _, tt := range []struct {
		opts []Option
		kib  int
	}{{nil, DefaultReadCacheKiB}, {[]Option{WithReadCache(512)}, 512}} {
		s, err := Open(filepath.Join(t.TempDir(), "mspd.db"), append(tt.opts, WithReadConns(2))...)
		if err != nil {
			t.Fatal(err)
		}
		// Both connections at once, so each is asked.
		var conns []interface{ Close() error }
		for range 2 {
			c, err := s.rdb.Conn(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			conns = append(conns, c)
			var size int
			if err := c.QueryRowContext(t.Context(), "PRAGMA cache_size").Scan(&size); err != nil {
				t.Fatal(err)
			}
			if size != -tt.kib {
				t.Errorf("cache_size %d, want %d", size, -tt.kib)
			}
		}
		for _, c := range conns {
			c.Close()
		}
		s.Close()
	}
}
