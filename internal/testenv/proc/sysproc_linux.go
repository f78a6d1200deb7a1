package proc

import "syscall"

// sysProcAttr makes the kernel kill the child when its parent dies.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
