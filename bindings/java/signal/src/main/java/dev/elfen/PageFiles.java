package dev.elfen;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.FileChannel;
import java.nio.file.AccessDeniedException;
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.OpenOption;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.nio.file.attribute.PosixFilePermission;
import java.security.SecureRandom;
import java.util.EnumSet;
import java.util.HexFormat;
import java.util.Set;
import java.util.function.Consumer;

/**
 * The page file: opening it as a role needs (and refusing one this process
 * cannot trust), mapping it, and publishing a new one atomically.
 */
final class PageFiles {
    private PageFiles() {}

    private static final SecureRandom RANDOM = new SecureRandom();

    /** A random instance id (odd, so never 0). */
    static long randomInstance() {
        return RANDOM.nextLong() | 1;
    }

    /** Opens {@code path} read-only or read-write, with the Rust side's errors. */
    static FileChannel open(Path path, boolean rw, String role) throws ElfenException {
        Set<OpenOption> opts = rw ? Set.of(StandardOpenOption.READ, StandardOpenOption.WRITE)
                : Set.of(StandardOpenOption.READ);
        try {
            return FileChannel.open(path, opts);
        } catch (NoSuchFileException e) {
            throw ElfenException.missing(path);
        } catch (AccessDeniedException e) {
            throw ElfenException.permissionDenied(path, rw, role);
        } catch (IOException | SecurityException e) {
            throw ElfenException.os(path, "open", e);
        }
    }

    /**
     * Opens the page file for {@code role} after refusing one this process
     * cannot trust: not a regular file, writable by its group or by others, or
     * owned by neither root nor this process's user (whoever can write a page
     * file can truncate it under every mapping, or steer batch threads). The
     * check reads the path's attributes just before opening it.
     */
    static FileChannel openTrusted(Path path, boolean rw, String role) throws ElfenException {
        java.util.Map<String, Object> a;
        try {
            a = Files.readAttributes(path, "unix:uid,mode,isRegularFile");
        } catch (NoSuchFileException e) {
            throw ElfenException.missing(path);
        } catch (IOException | UnsupportedOperationException | SecurityException e) {
            throw ElfenException.os(path, "stat", e);
        }
        int uid = (Integer) a.get("uid");
        int mode = (Integer) a.get("mode") & 07777;
        if (!(Boolean) a.get("isRegularFile")) {
            throw ElfenException.untrusted(path, describeUser(uid), mode, "it is not a regular file");
        }
        if ((mode & 022) != 0) {
            throw ElfenException.untrusted(path, describeUser(uid), mode, "its group or other users can write it");
        }
        int me = Native.geteuid();
        if (uid != 0 && uid != me) {
            throw ElfenException.untrusted(path, describeUser(uid), mode,
                    "it is owned by neither root nor this process's user (" + describeUser(me) + ")");
        }
        return open(path, rw, role);
    }

    /** The uid owning {@code path} (-1 if unreadable). */
    static int owner(Path path) {
        try {
            return (Integer) Files.getAttribute(path, "unix:uid");
        } catch (IOException | UnsupportedOperationException | SecurityException e) {
            return -1;
        }
    }

    /** "user nobody (uid 65534)", or "uid 4242" without a name. */
    static String describeUser(int uid) {
        String n = Native.userName(uid);
        return n == null ? "uid " + Integer.toUnsignedString(uid)
                : "user " + n + " (uid " + Integer.toUnsignedString(uid) + ")";
    }

    /** "group batch (gid 1001)", or "gid 1001" without a name. */
    static String describeGroup(int gid) {
        String n = Native.groupName(gid);
        return n == null ? "gid " + Integer.toUnsignedString(gid)
                : "group " + n + " (gid " + Integer.toUnsignedString(gid) + ")";
    }

    /** Who holds an existing file at {@code path}: its owner, the creator its header names, what to do. */
    static ElfenException existsError(Path path) {
        int uid;
        try {
            uid = (Integer) Files.getAttribute(path, "unix:uid", java.nio.file.LinkOption.NOFOLLOW_LINKS);
        } catch (IOException | UnsupportedOperationException | SecurityException e) {
            uid = -1;
        }
        int pid = readCreatorPid(path);
        int me = Native.geteuid();
        boolean mine = uid == me || uid == 0;
        String advice = mine ? "remove it or create with replace"
                : "it belongs to another user, not to this process's (" + describeUser(me) + ") nor to root: remove it"
                        + " (rm " + path + ", as its owner or root) or choose another page name";
        return ElfenException.exists(path, uid == -1 ? "an unknown owner" : describeUser(uid), pid,
                Native.alive(pid), advice);
    }

    /** Maps the whole file after checking it covers {@code headerSize}; closes the channel. */
    static MemorySegment mapChecked(Path path, FileChannel ch, int headerSize, boolean rw, Arena arena)
            throws ElfenException {
        try (ch) {
            long size;
            try {
                size = ch.size();
            } catch (IOException e) {
                throw ElfenException.os(path, "stat", e);
            }
            if (size < headerSize) {
                throw ElfenException.shortFile(path, size, headerSize);
            }
            try {
                return ch.map(rw ? FileChannel.MapMode.READ_WRITE : FileChannel.MapMode.READ_ONLY, 0, size, arena);
            } catch (IOException e) {
                throw ElfenException.os(path, "mmap", e);
            }
        } catch (IOException e) {
            throw ElfenException.os(path, "close", e);
        }
    }

    /** The creator pid recorded in the page at {@code path}, or 0 (a regular file's only). */
    static int readCreatorPid(Path path) {
        if (!Files.isRegularFile(path)) {
            return 0;
        }
        try (FileChannel ch = FileChannel.open(path, StandardOpenOption.READ)) {
            ByteBuffer b = ByteBuffer.allocate(4).order(ByteOrder.LITTLE_ENDIAN);
            if (ch.read(b, Layout.Header.CREATOR_PID) != 4) {
                return 0;
            }
            return b.getInt(0);
        } catch (IOException e) {
            return 0;
        }
    }

    static Set<PosixFilePermission> permissions(int mode) {
        Set<PosixFilePermission> s = EnumSet.noneOf(PosixFilePermission.class);
        PosixFilePermission[] bits = {
            PosixFilePermission.OTHERS_EXECUTE, PosixFilePermission.OTHERS_WRITE, PosixFilePermission.OTHERS_READ,
            PosixFilePermission.GROUP_EXECUTE, PosixFilePermission.GROUP_WRITE, PosixFilePermission.GROUP_READ,
            PosixFilePermission.OWNER_EXECUTE, PosixFilePermission.OWNER_WRITE, PosixFilePermission.OWNER_READ,
        };
        for (int i = 0; i < bits.length; i++) {
            if ((mode & (1 << i)) != 0) {
                s.add(bits[i]);
            }
        }
        return s;
    }

    /**
     * Writes a new file of {@code size} bytes at a temporary name beside
     * {@code dest}, fills it through {@code fill} (a read-write mapping of the
     * whole file), sets its mode exactly, and publishes it at
     * {@code dest}: a hard link, which fails if {@code dest} exists, or a
     * rename when replacing. The temporary file is gone in every case.
     */
    static void publish(Path dest, long size, int mode, boolean replace, Consumer<MemorySegment> fill)
            throws ElfenException {
        String suffix = ".tmp" + ProcessHandle.current().pid() + "."
                + HexFormat.of().toHexDigits((int) randomInstance());
        Path tmp = dest.resolveSibling(dest.getFileName() + suffix);
        try {
            try (FileChannel ch = FileChannel.open(tmp, StandardOpenOption.CREATE_NEW, StandardOpenOption.READ,
                    StandardOpenOption.WRITE)) {
                // exactly `mode`, whatever the umask
                Files.setPosixFilePermissions(tmp, permissions(mode));
                try (Arena a = Arena.ofConfined()) {
                    // mapping read-write past the end grows the file (zero-filled)
                    fill.accept(ch.map(FileChannel.MapMode.READ_WRITE, 0, size, a));
                }
            } catch (IOException | UnsupportedOperationException | SecurityException e) {
                throw ElfenException.os(dest, "create", e);
            }
            if (replace) {
                try {
                    Files.move(tmp, dest, StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
                } catch (AccessDeniedException e) {
                    throw existsError(dest);
                } catch (IOException e) {
                    throw ElfenException.os(dest, "rename", e);
                }
            } else {
                try {
                    Files.createLink(dest, tmp);
                } catch (FileAlreadyExistsException e) {
                    throw existsError(dest);
                } catch (IOException | UnsupportedOperationException e) {
                    throw ElfenException.os(dest, "link", e);
                }
            }
        } finally {
            try {
                Files.deleteIfExists(tmp);
            } catch (IOException e) {
                // best effort: the temporary name is unique to this process
            }
        }
    }
}
