package testsvc

import "syscall"

// freeBytes is the room left on the filesystem of dir for an unprivileged writer.
func freeBytes(dir string) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * st.Bsize, nil
}
