#!/bin/busybox sh
# /init of the onesync VM harness (crates/vm/src/guest/init.sh).
# initramfs.rs fills in the module files to insmod (in order) and the name of the per-boot
# file that sets the command's argv; console.rs reads the @@onesync-vm:...@@ markers.
/bin/busybox --install -s /bin
export PATH=/bin TERM=dumb HOME=/
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
# Bytes as the command wrote them: no "\n" -> "\r\n" on the console.
stty -F /dev/console -opost 2>/dev/null
for module in @MODULES@; do
    insmod "/lib/modules/$module" || echo "@@onesync-vm:problem insmod $module failed@@"
done
fs=
for word in $(cat /proc/cmdline); do
    case "$word" in onesync.fs=*) fs="${word#onesync.fs=}" ;; esac
done
tries=0
while [ ! -b /dev/vda ] && [ "$tries" -lt 100 ]; do usleep 50000; tries=$((tries + 1)); done
if mount -t "$fs" /dev/vda /mnt; then
    cd /mnt
    . "/@ARGS@"
    echo "@@onesync-vm:start@@"
    "$@" </dev/null 2>/tmp/stderr
    code=$?
    echo "@@onesync-vm:exit=$code@@"
    echo "@@onesync-vm:stderr-begin@@"
    cat /tmp/stderr
    echo "@@onesync-vm:stderr-end@@"
    cd /
    kill -9 -1 2>/dev/null
    sync
    umount /mnt || echo "@@onesync-vm:problem umount /mnt failed@@"
else
    echo "@@onesync-vm:problem mount -t $fs /dev/vda /mnt failed@@"
    dmesg | tail -n 20
fi
poweroff -f
