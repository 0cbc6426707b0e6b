package auth

import (
	"context"
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
)

// fileKeys are the public keys of a PEM file. Several keys let a signer
// rotate: tokens verify against any of them.
type fileKeys struct {
	path string
	log  *slog.Logger
	set  atomic.Pointer[[]verificationKey]
}

func newFileKeys(path string, log *slog.Logger) (*fileKeys, error) {
	f := &fileKeys{path: path, log: log}
	keys, err := readKeyFile(path)
	if err != nil {
		return nil, err
	}
	f.set.Store(&keys)
	return f, nil
}

// keys ignores kid: a PEM file names no key ids.
func (f *fileKeys) keys(context.Context, string) ([]verificationKey, error) {
	return *f.set.Load(), nil
}

func (f *fileKeys) held() []verificationKey { return *f.set.Load() }

func (f *fileKeys) reload() error {
	keys, err := readKeyFile(f.path)
	if err != nil {
		f.log.Warn("auth: JWT key file not reloaded; the previous keys stay in force", "file", f.path, "err", err)
		return err
	}
	f.set.Store(&keys)
	f.log.Info("auth: JWT key file reloaded", "file", f.path, "keys", len(keys))
	return nil
}

// readKeyFile parses every PEM block of path as a public key.
func readKeyFile(path string) ([]verificationKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("auth: JWT key file: %w", err)
	}
	var keys []verificationKey
	for n := 1; ; n++ {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			break
		}
		key, err := parsePEMKey(block)
		if err == nil {
			err = checkKey(key)
		}
		if err != nil {
			return nil, fmt.Errorf("auth: JWT key file %s, PEM block %d: %w", path, n, err)
		}
		keys = append(keys, verificationKey{key: key})
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("auth: JWT key file %s: no PEM public key", path)
	}
	return keys, nil
}

func parsePEMKey(b *pem.Block) (crypto.PublicKey, error) {
	switch b.Type {
	case "PUBLIC KEY":
		return x509.ParsePKIXPublicKey(b.Bytes)
	case "RSA PUBLIC KEY":
		return x509.ParsePKCS1PublicKey(b.Bytes)
	case "CERTIFICATE":
		cert, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, err
		}
		return cert.PublicKey, nil
	}
	return nil, errors.New("a " + b.Type + " block; want PUBLIC KEY, RSA PUBLIC KEY or CERTIFICATE")
}
