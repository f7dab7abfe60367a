//! Process spawning wrappers used by the guest (fork/exec with a pre-exec confinement hook).
