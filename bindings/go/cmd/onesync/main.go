// Command onesync is the onesync command (import, export, check, info, salvage: run
// `onesync --help`) for Go users:
//
//	go install onesync.dev/go/onesync/cmd/onesync@latest
//	go run onesync.dev/go/onesync/cmd/onesync info app.db
//
// The command is one Rust program, the same in every onesync package; this one carries it
// embedded (bin/onesync, put here by `onesync-package go`), writes it once into the user's
// cache directory (named by its digest, so versions never mix) and runs it in this
// process's place. It needs no cgo.
package main

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

//go:embed bin/onesync
var program []byte

func main() {
	path, err := installed()
	if err != nil {
		fmt.Fprintf(os.Stderr, "onesync: error: %v\n", err)
		os.Exit(1)
	}
	args := append([]string{"onesync"}, os.Args[1:]...)
	err = syscall.Exec(path, args, os.Environ())
	fmt.Fprintf(os.Stderr, "onesync: error: running %s: %v\n", path, err)
	os.Exit(1)
}

// installed returns the path of the embedded program in the user's cache directory,
// writing it there first if it is not there with the same bytes.
func installed() (string, error) {
	digest := sha256.Sum256(program)
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no cache directory for the onesync program: %w", err)
	}
	dir := filepath.Join(cache, "onesync", hex.EncodeToString(digest[:8]))
	path := filepath.Join(dir, "onesync")
	if have, err := os.ReadFile(path); err == nil && bytes.Equal(have, program) {
		return path, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	// Written under another name and renamed, so that a concurrent run never executes a
	// half-written file.
	tmp, err := os.CreateTemp(dir, "onesync-*.tmp")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(program); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Chmod(0o755); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Close(); err != nil {
		return "", err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return "", err
	}
	return path, nil
}
