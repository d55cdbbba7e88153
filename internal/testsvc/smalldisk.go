package testsvc

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// SmallDisk is a real, small filesystem for a test of what idem does when the disk
// fills: a tmpfs of a fixed size mounted on a temporary directory, unmounted when the
// test ends. Writes beyond its size fail with ENOSPC, as on a full volume.
type SmallDisk struct {
	// Dir is the mount point: put the database (or a tablespace) under it.
	Dir     string
	ballast string
}

// NewSmallDisk mounts a tmpfs of size bytes (rounded up to pages) for t. Mounting
// needs Linux and root (or CAP_SYS_ADMIN); without them the test skips, or fails
// under IDEM_REQUIRE_SERVICES=1.
func NewSmallDisk(t testing.TB, size int64) *SmallDisk {
	t.Helper()
	fail := func(format string, args ...any) {
		t.Helper()
		msg := fmt.Sprintf("small disk: "+format, args...)
		if Required() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	if runtime.GOOS != "linux" {
		fail("a tmpfs mount needs Linux (this is %s)", runtime.GOOS)
	}
	if size <= 0 {
		t.Fatalf("NewSmallDisk: size must be positive (got %d)", size)
	}
	dir, err := os.MkdirTemp("", "idem-smalldisk-")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d,mode=0777", size), "tmpfs", dir).CombinedOutput()
	if err != nil {
		_ = os.Remove(dir)
		fail("mount -t tmpfs on %s: %v: %s (run the tests as root, or with CAP_SYS_ADMIN)", dir, err, out)
	}
	t.Cleanup(func() {
		// lazy: a server the test started may still hold a file open while it stops
		if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
			return
		}
		_ = os.Remove(dir)
	})
	return &SmallDisk{Dir: dir, ballast: filepath.Join(dir, "ballast")}
}

// Fill writes a ballast file until the disk has no room left: every later write
// that needs a new block fails.
func (d *SmallDisk) Fill(t testing.TB) { d.FillLeaving(t, 0) }

// FillLeaving writes a ballast file until at most room bytes are left free: what is
// written next fills the disk by its own progress.
func (d *SmallDisk) FillLeaving(t testing.TB, room int64) {
	t.Helper()
	free, err := freeBytes(d.Dir)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(d.ballast, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4096)
	for ; free > room; free -= int64(len(buf)) {
		if _, err := f.Write(buf); err != nil {
			return // ENOSPC: full
		}
	}
}

// Free removes the ballast: space returns.
func (d *SmallDisk) Free(t testing.TB) {
	t.Helper()
	if err := os.Remove(d.ballast); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
}

// Chown hands the mount point to uid and gid, for a server that runs as another
// user (a PostgreSQL tablespace directory must belong to the server's user).
func (d *SmallDisk) Chown(t testing.TB, uid, gid int) {
	t.Helper()
	if err := os.Chown(d.Dir, uid, gid); err != nil {
		t.Fatal(err)
	}
}
