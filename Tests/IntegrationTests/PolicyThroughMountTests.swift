import CLinux
import Foundation
import Glibc
import Testing

// SPEC §2's table, row by row, through the kernel: every operation on every area with
// real system calls, checking the errno, the audit record of each denial, and the store.

/// The columns of SPEC §2's table.
enum OperationKind: Sendable {
    case read, createInside, changeContent, changeMetadata, delete, renameOut, renameIn, exchange, linkOut
}

/// One row of SPEC §2's table: an area and the directory in which to try things.
struct AreaUnderTest: Sendable, CustomTestStringConvertible {
    enum Rules: Sendable { case bundle, inbox, writable }

    let name: String
    /// The directory, container-relative, in which files are tried.
    let directory: String
    /// The area's name in the audit log.
    let area: String
    let rules: Rules
    var testDescription: String { name }

    /// `Demo.app` and below.
    static let bundle = AreaUnderTest(name: "bundle", directory: "Demo.app", area: "bundle", rules: .bundle)
    /// Below `Documents/Inbox`.
    static let inbox = AreaUnderTest(name: "inbox", directory: "Documents/Inbox", area: "inbox", rules: .inbox)
    /// Data (`Documents`, `Library` and its two data folders), cache and temporary.
    static let writable = [
        AreaUnderTest(name: "Documents", directory: "Documents", area: "data", rules: .writable),
        AreaUnderTest(name: "Library", directory: "Library", area: "data", rules: .writable),
        AreaUnderTest(name: "Application Support", directory: "Library/Application Support", area: "data", rules: .writable),
        AreaUnderTest(name: "Preferences", directory: "Library/Preferences", area: "data", rules: .writable),
        AreaUnderTest(name: "Caches", directory: "Library/Caches", area: "cache", rules: .writable),
        AreaUnderTest(name: "tmp", directory: "tmp", area: "temporary", rules: .writable),
    ]

    /// SPEC §2 for `kind` here: nil when allowed, else the errno and the rule audited.
    func denial(_ kind: OperationKind) -> (errno: Int32, rule: String)? {
        switch rules {
        case .writable:
            return nil
        case .bundle:
            if kind == .read { return nil }
            return (EPERM, kind == .linkOut ? "linkWouldExposeReadOnlyFile" : "bundleIsReadOnly")
        case .inbox:
            switch kind {
            case .read, .delete, .renameOut: return nil
            case .createInside, .changeContent, .changeMetadata, .renameIn, .exchange, .linkOut:
                return (EACCES, "inboxIsReadDeleteOnly")
            }
        }
    }
}

/// The nodes one attempt works on: a file and a folder in the area, a name there that does
/// not exist, and a file and a free name in a writable folder outside it.
struct Scene {
    /// Which of the scene's nodes an attempt names.
    enum Role { case file, directory, fresh, outside, outsideFresh }

    let container: MountedContainer
    let area: AreaUnderTest
    let file: String
    let directory: String
    let fresh: String
    let outside: String
    let outsideFresh: String
    /// The file's content before the attempt.
    let original: [UInt8]
    /// The outside file's content before the attempt.
    let outsideOriginal: [UInt8]

    static let bundleFileContent = bytes("<plist>demo</plist>\n")

    init(_ container: MountedContainer, _ area: AreaUnderTest, _ slug: String) {
        self.container = container
        self.area = area
        if area.rules == .bundle {
            // The bundle cannot be prepared (it will be signed): use what it holds.
            file = "Demo.app/Info.plist"
            directory = "Demo.app/res"
            original = Self.bundleFileContent
        } else {
            file = "\(area.directory)/\(slug)"
            directory = "\(area.directory)/\(slug).d"
            original = bytes("original \(slug)\n")
        }
        fresh = "\(area.directory)/\(slug).new"
        outside = "Documents/outside/\(slug)"
        outsideFresh = "Documents/outside/\(slug).new"
        outsideOriginal = bytes("outside \(slug)\n")
    }

    /// Host path through the mount.
    func m(_ relative: String) -> String { container.mounted(relative) }
    /// Host path in the store.
    func s(_ relative: String) -> String { container.stored(relative) }

    /// The container-relative path of `role`.
    func path(_ role: Role) -> String {
        switch role {
        case .file: file
        case .directory: directory
        case .fresh: fresh
        case .outside: outside
        case .outsideFresh: outsideFresh
        }
    }

    /// The audit log's area of `role`.
    func areaName(_ role: Role) -> String {
        switch role {
        case .file, .directory, .fresh: area.area
        case .outside, .outsideFresh: "data"
        }
    }
}

/// One operation tried in every area: what it does, which column it belongs to, what the
/// audit log calls it and which nodes it names, and what the store shows when it succeeds.
struct Attempt: Sendable, CustomTestStringConvertible {
    /// The attempt's name, also the name of the files prepared for it.
    let slug: String
    /// Its column of SPEC §2's table.
    let kind: OperationKind
    /// The operation the audit log names for it when it is denied.
    let audited: String
    /// The nodes it names, in the audit log's order.
    let names: [Scene.Role]
    /// Does it; returns the errno, or 0.
    let act: @Sendable (Scene) -> Int32
    /// Checks the store after it succeeded.
    let effect: @Sendable (Scene) -> Void
    var testDescription: String { slug }

    init(
        _ slug: String, _ kind: OperationKind, audited: String, names: [Scene.Role],
        act: @escaping @Sendable (Scene) -> Int32, effect: @escaping @Sendable (Scene) -> Void = { _ in }
    ) {
        self.slug = slug
        self.kind = kind
        self.audited = audited
        self.names = names
        self.act = act
        self.effect = effect
    }
}

private let oldTime = 978_307_200  // 2001-01-01, the prepared files' times.
private let setTime = 1_000_000_000

/// Every operation of SPEC §2's mutation list, plus reads.
let attempts: [Attempt] = [
    // Read, list, stat, getxattr: allowed everywhere.
    Attempt(
        "read", .read, audited: "", names: [.file],
        act: { s in
            // Reading changes nothing but the access time: not the store file's status, which
            // programs such as tar compare before and after reading.
            let before = nodeState(s.s(s.file))
            var opened = stat(), read = stat()
            let code = withOpened(s.m(s.file), O_RDONLY) { fd in
                _ = fstat(fd, &opened)
                #expect(readAll(fd) == s.original, "read \(s.file)")
                return outcome(fstat(fd, &read))
            }
            #expect(nodeState(s.s(s.file)) == before, "reading \(s.file) changed it in the store")
            #expect(
                code != 0 || (opened.st_ctim.tv_sec, opened.st_ctim.tv_nsec) == (read.st_ctim.tv_sec, read.st_ctim.tv_nsec),
                "reading \(s.file) changed its ctime as the mount shows it")
            return code
        }),
    Attempt(
        "stat", .read, audited: "", names: [.file],
        act: { s in
            var info = stat()
            let code = outcome(stat(s.m(s.file), &info))
            #expect(code != 0 || info.st_size == s.original.count, "stat \(s.file)")
            return code
        }),
    Attempt(
        "readdir", .read, audited: "", names: [.file],
        act: { s in
            let names = (try? FileManager.default.contentsOfDirectory(atPath: s.m(s.area.directory))) ?? []
            #expect(names.contains((s.file as NSString).lastPathComponent), "list \(s.area.directory): \(names)")
            return 0
        }),
    Attempt(
        "getxattr", .read, audited: "", names: [.file],
        act: { s in
            if s.area.rules != .bundle {
                #expect(extendedAttribute(s.m(s.file), "user.present") == bytes("yes"), "getxattr user.present")
            }
            var buffer = [UInt8](repeating: 0, count: 64)
            let code = outcome(buffer.withUnsafeMutableBytes { getxattr(s.m(s.file), "user.missing", $0.baseAddress, $0.count) })
            #expect(code == ENODATA, "a missing attribute is ENODATA, got \(errnoSymbol(code))")
            return 0
        }),
    Attempt(
        "copy_file_range-from", .read, audited: "", names: [.file],
        act: { s in
            withOpened(s.m(s.file), O_RDONLY) { input in
                withOpened(s.m(s.outside), O_WRONLY | O_TRUNC) { output in
                    outcome(clinux_copy_file_range(input, nil, output, nil, 1 << 16, 0))
                }
            }
        },
        effect: { s in
            #expect(contents(s.s(s.outside)) == s.original, "copied out of \(s.file)")
        }),

    // Create inside.
    Attempt(
        "open-creat-excl", .createInside, audited: "create", names: [.fresh],
        act: { s in
            withOpened(s.m(s.fresh), O_CREAT | O_EXCL | O_WRONLY, mode: 0o640)
        },
        effect: { s in
            let info = status(s.s(s.fresh))
            #expect(info.map { $0.st_mode & S_IFMT == S_IFREG && $0.st_size == 0 && $0.st_mode & 0o7777 == 0o640 } == true)
        }),
    Attempt(
        "creat", .createInside, audited: "create", names: [.fresh],
        act: { s in
            let fd = creat(s.m(s.fresh), 0o644)
            guard fd >= 0 else { return errno }
            defer { close(fd) }
            return writeAll(fd, bytes("created"))
        },
        effect: { s in
            #expect(contents(s.s(s.fresh)) == bytes("created"))
        }),
    Attempt(
        "mkdir", .createInside, audited: "mkdir", names: [.fresh],
        act: { s in
            outcome(mkdir(s.m(s.fresh), 0o750))
        },
        effect: { s in
            #expect(status(s.s(s.fresh)).map { $0.st_mode & S_IFMT == S_IFDIR && $0.st_mode & 0o777 == 0o750 } == true)
        }),
    Attempt(
        "mkfifo", .createInside, audited: "mknod", names: [.fresh],
        act: { s in
            outcome(mkfifo(s.m(s.fresh), 0o600))
        },
        effect: { s in
            #expect(status(s.s(s.fresh)).map { $0.st_mode & S_IFMT == S_IFIFO } == true)
        }),
    Attempt(
        "mknod-regular", .createInside, audited: "mknod", names: [.fresh],
        act: { s in
            outcome(mknod(s.m(s.fresh), S_IFREG | 0o600, 0))
        },
        effect: { s in
            #expect(status(s.s(s.fresh)).map { $0.st_mode & S_IFMT == S_IFREG && $0.st_mode & 0o777 == 0o600 } == true)
        }),
    Attempt(
        "symlink", .createInside, audited: "symlink", names: [.fresh],
        act: { s in
            outcome(symlink("some/target", s.m(s.fresh)))
        },
        effect: { s in
            #expect(linkTarget(s.s(s.fresh)) == "some/target")
        }),
    Attempt(
        "link-into", .createInside, audited: "link", names: [.outside, .fresh],
        act: { s in
            outcome(link(s.m(s.outside), s.m(s.fresh)))
        },
        effect: { s in
            #expect(status(s.s(s.fresh))?.st_ino == status(s.s(s.outside))?.st_ino)
            #expect(status(s.s(s.outside))?.st_nlink == 2)
        }),
    Attempt(
        "rename-in", .renameIn, audited: "rename", names: [.outside, .fresh],
        act: { s in
            outcome(rename(s.m(s.outside), s.m(s.fresh)))
        },
        effect: { s in
            #expect(contents(s.s(s.fresh)) == s.outsideOriginal)
            #expect(status(s.s(s.outside)) == nil)
        }),
    Attempt(
        "rename-noreplace", .renameIn, audited: "rename", names: [.outside, .fresh],
        act: { s in
            outcome(clinux_renameat2(AT_FDCWD, s.m(s.outside), AT_FDCWD, s.m(s.fresh), clinux_RENAME_NOREPLACE))
        },
        effect: { s in
            #expect(contents(s.s(s.fresh)) == s.outsideOriginal)
            #expect(status(s.s(s.outside)) == nil)
        }),
    Attempt(
        "rename-over", .renameIn, audited: "rename", names: [.outside, .file],
        act: { s in
            outcome(rename(s.m(s.outside), s.m(s.file)))
        },
        effect: { s in
            #expect(contents(s.s(s.file)) == s.outsideOriginal)
            #expect(status(s.s(s.outside)) == nil)
        }),
    Attempt(
        "rename-within", .renameIn, audited: "rename", names: [.file, .fresh],
        act: { s in
            outcome(rename(s.m(s.file), s.m(s.fresh)))
        },
        effect: { s in
            #expect(contents(s.s(s.fresh)) == s.original)
            #expect(status(s.s(s.file)) == nil)
        }),
    Attempt(
        "rename-exchange", .exchange, audited: "rename", names: [.outside, .file],
        act: { s in
            outcome(clinux_renameat2(AT_FDCWD, s.m(s.outside), AT_FDCWD, s.m(s.file), clinux_RENAME_EXCHANGE))
        },
        effect: { s in
            #expect(contents(s.s(s.file)) == s.outsideOriginal)
            #expect(contents(s.s(s.outside)) == s.original)
        }),

    // Change content: every open flag that can write, and every call that writes.
    Attempt(
        "open-wronly", .changeContent, audited: "open", names: [.file],
        act: { s in
            withOpened(s.m(s.file), O_WRONLY) { writeAll($0, bytes("changed")) }
        },
        effect: { s in
            #expect(contents(s.s(s.file)) == overlay(s.original, "changed", at: 0))
        }),
    Attempt(
        "open-rdwr", .changeContent, audited: "open", names: [.file],
        act: { s in
            withOpened(s.m(s.file), O_RDWR) { writeAll($0, bytes("XY"), at: 3) }
        },
        effect: { s in
            #expect(contents(s.s(s.file)) == overlay(s.original, "XY", at: 3))
        }),
    Attempt(
        "open-append", .changeContent, audited: "open", names: [.file],
        act: { s in
            withOpened(s.m(s.file), O_WRONLY | O_APPEND) { writeAll($0, bytes("+tail")) }
        },
        effect: { s in
            #expect(contents(s.s(s.file)) == s.original + bytes("+tail"))
        }),
    Attempt(
        "open-rdwr-append", .changeContent, audited: "open", names: [.file],
        act: { s in
            withOpened(s.m(s.file), O_RDWR | O_APPEND) { writeAll($0, bytes("+more")) }
        },
        effect: { s in
            #expect(contents(s.s(s.file)) == s.original + bytes("+more"))
        }),
    Attempt(
        "open-rdonly-append", .changeContent, audited: "open", names: [.file],
        act: { s in
            withOpened(s.m(s.file), O_RDONLY | O_APPEND)
        },
        effect: { s in
            #expect(contents(s.s(s.file)) == s.original)
        }),
    Attempt(
        "open-rdonly-trunc", .changeContent, audited: "open", names: [.file],
        act: { s in
            withOpened(s.m(s.file), O_RDONLY | O_TRUNC)
        },
        effect: { s in
            #expect(contents(s.s(s.file)) == [])
        }),
    Attempt(
        "open-wronly-trunc", .changeContent, audited: "open", names: [.file],
        act: { s in
            withOpened(s.m(s.file), O_WRONLY | O_TRUNC) { writeAll($0, bytes("new")) }
        },
        effect: { s in
            #expect(contents(s.s(s.file)) == bytes("new"))
        }),
    Attempt(
        "open-creat-existing", .changeContent, audited: "open", names: [.file],
        act: { s in
            withOpened(s.m(s.file), O_CREAT | O_WRONLY) { writeAll($0, bytes("C")) }
        },
        effect: { s in
            #expect(contents(s.s(s.file)) == overlay(s.original, "C", at: 0))
        }),
    Attempt(
        "creat-existing", .changeContent, audited: "open", names: [.file],
        act: { s in
            let fd = creat(s.m(s.file), 0o644)
            guard fd >= 0 else { return errno }
            close(fd)
            return 0
        },
        effect: { s in
            #expect(contents(s.s(s.file)) == [])
        }),
    Attempt(
        "truncate", .changeContent, audited: "truncate", names: [.file],
        act: { s in
            outcome(truncate(s.m(s.file), 4))
        },
        effect: { s in
            #expect(contents(s.s(s.file)) == Array(s.original.prefix(4)))
        }),
    Attempt(
        "truncate-extend", .changeContent, audited: "truncate", names: [.file],
        act: { s in
            outcome(truncate(s.m(s.file), 100))
        },
        effect: { s in
            #expect(contents(s.s(s.file)) == s.original + [UInt8](repeating: 0, count: 100 - s.original.count))
        }),
    // A descriptor that can write exists only after an open the policy allowed: in a
    // read-only area the open is what is denied.
    Attempt(
        "ftruncate", .changeContent, audited: "open", names: [.file],
        act: { s in
            withOpened(s.m(s.file), O_RDWR) { outcome(ftruncate($0, 2)) }
        },
        effect: { s in
            #expect(contents(s.s(s.file)) == Array(s.original.prefix(2)))
        }),
    Attempt(
        "fallocate", .changeContent, audited: "open", names: [.file],
        act: { s in
            withOpened(s.m(s.file), O_RDWR) { fd in
                clinux_fallocate(fd, 0, 0, 65536) == 0 ? 0 : errno
            }
        },
        effect: { s in
            #expect(status(s.s(s.file))?.st_size == 65536)
            #expect(contents(s.s(s.file)).map { Array($0.prefix(s.original.count)) } == s.original)
        }),
    Attempt(
        "copy_file_range-into", .changeContent, audited: "open", names: [.file],
        act: { s in
            withOpened(s.m(s.outside), O_RDONLY) { input in
                withOpened(s.m(s.file), O_WRONLY) { output in
                    outcome(clinux_copy_file_range(input, nil, output, nil, 1 << 16, 0))
                }
            }
        },
        effect: { s in
            #expect(contents(s.s(s.file)) == overlay(s.original, String(decoding: s.outsideOriginal, as: UTF8.self), at: 0))
        }),

    // Change metadata.
    Attempt(
        "chmod", .changeMetadata, audited: "chmod", names: [.file],
        act: { s in
            outcome(chmod(s.m(s.file), 0o604))
        },
        effect: { s in
            #expect(status(s.s(s.file)).map { $0.st_mode & 0o7777 } == 0o604)
        }),
    Attempt(
        "fchmod", .changeMetadata, audited: "chmod", names: [.file],
        act: { s in
            withOpened(s.m(s.file), O_RDONLY) { outcome(fchmod($0, 0o600)) }
        },
        effect: { s in
            #expect(status(s.s(s.file)).map { $0.st_mode & 0o7777 } == 0o600)
        }),
    Attempt(
        "chown", .changeMetadata, audited: "chown", names: [.file],
        act: { s in
            outcome(chown(s.m(s.file), 1000, 1000))
        },
        effect: { s in
            #expect(status(s.s(s.file)).map { [$0.st_uid, $0.st_gid] } == [1000, 1000])
        }),
    Attempt(
        "utimensat", .changeMetadata, audited: "utimens", names: [.file],
        act: { s in
            outcome(utimensat(AT_FDCWD, s.m(s.file), times(setTime), 0))
        },
        effect: { s in
            #expect(status(s.s(s.file))?.st_mtim.tv_sec == setTime)
            #expect(status(s.s(s.file))?.st_atim.tv_sec == setTime)
        }),
    Attempt(
        "utimensat-now", .changeMetadata, audited: "utimens", names: [.file],
        act: { s in
            outcome(utimensat(AT_FDCWD, s.m(s.file), nil, 0))
        },
        effect: { s in
            #expect((status(s.s(s.file))?.st_mtim.tv_sec ?? 0) > Int(Date().timeIntervalSince1970) - 600)
        }),
    Attempt(
        "futimens", .changeMetadata, audited: "utimens", names: [.file],
        act: { s in
            withOpened(s.m(s.file), O_RDONLY) { outcome(futimens($0, times(setTime))) }
        },
        effect: { s in
            #expect(status(s.s(s.file))?.st_mtim.tv_sec == setTime)
        }),
    Attempt(
        "setxattr", .changeMetadata, audited: "setxattr", names: [.file],
        act: { s in
            outcome(setxattr(s.m(s.file), "user.test", "v1", 2, 0))
        },
        effect: { s in
            #expect(extendedAttribute(s.s(s.file), "user.test") == bytes("v1"))
        }),
    Attempt(
        "fsetxattr", .changeMetadata, audited: "setxattr", names: [.file],
        act: { s in
            withOpened(s.m(s.file), O_RDONLY) { outcome(fsetxattr($0, "user.fd", "v2", 2, 0)) }
        },
        effect: { s in
            #expect(extendedAttribute(s.s(s.file), "user.fd") == bytes("v2"))
        }),
    Attempt(
        "removexattr", .changeMetadata, audited: "removexattr", names: [.file],
        act: { s in
            outcome(removexattr(s.m(s.file), "user.present"))
        },
        effect: { s in
            #expect(extendedAttribute(s.s(s.file), "user.present") == nil)
        }),

    // Delete.
    Attempt(
        "unlink", .delete, audited: "unlink", names: [.file],
        act: { s in
            outcome(unlink(s.m(s.file)))
        },
        effect: { s in
            #expect(status(s.s(s.file)) == nil)
        }),
    Attempt(
        "rmdir", .delete, audited: "rmdir", names: [.directory],
        act: { s in
            outcome(rmdir(s.m(s.directory)))
        },
        effect: { s in
            #expect(status(s.s(s.directory)) == nil)
        }),

    // Rename out of the area, hard link out of it.
    Attempt(
        "rename-out", .renameOut, audited: "rename", names: [.file, .outsideFresh],
        act: { s in
            outcome(rename(s.m(s.file), s.m(s.outsideFresh)))
        },
        effect: { s in
            #expect(contents(s.s(s.outsideFresh)) == s.original)
            #expect(status(s.s(s.file)) == nil)
        }),
    Attempt(
        "rename-out-over", .renameOut, audited: "rename", names: [.file, .outside],
        act: { s in
            outcome(rename(s.m(s.file), s.m(s.outside)))
        },
        effect: { s in
            #expect(contents(s.s(s.outside)) == s.original)
            #expect(status(s.s(s.file)) == nil)
        }),
    Attempt(
        "rename-directory-out", .renameOut, audited: "rename", names: [.directory, .outsideFresh],
        act: { s in
            outcome(rename(s.m(s.directory), s.m(s.outsideFresh)))
        },
        effect: { s in
            #expect(status(s.s(s.outsideFresh)).map { $0.st_mode & S_IFMT == S_IFDIR } == true)
            #expect(status(s.s(s.directory)) == nil)
        }),
    Attempt(
        "link-out", .linkOut, audited: "link", names: [.file, .outsideFresh],
        act: { s in
            outcome(link(s.m(s.file), s.m(s.outsideFresh)))
        },
        effect: { s in
            #expect(status(s.s(s.outsideFresh))?.st_ino == status(s.s(s.file))?.st_ino)
            #expect(status(s.s(s.file))?.st_nlink == 2)
        }),
]

@Suite("Policy through the mount (SPEC §2)")
struct PolicyThroughMountTests {
    /// Puts, for every attempt, a file and an empty folder in `area` (unless it is the
    /// bundle) and a file in `Documents/outside`, all dated 2001 and with `user.present`.
    static func prepare(_ container: MountedContainer, _ area: AreaUnderTest) throws {
        for attempt in attempts {
            let scene = Scene(container, area, attempt.slug)
            var made = [scene.outside]
            try putInStore(container, scene.outside, String(decoding: scene.outsideOriginal, as: UTF8.self))
            if area.rules != .bundle {
                try putInStore(container, scene.file, String(decoding: scene.original, as: UTF8.self))
                try makeStoredDirectory(container, scene.directory)
                made += [scene.file, scene.directory]
            }
            for path in made {
                _ = setxattr(container.stored(path), "user.present", "yes", 3, 0)
                _ = utimensat(AT_FDCWD, container.stored(path), times(oldTime), AT_SYMLINK_NOFOLLOW)
            }
        }
    }

    /// Tries every attempt in `area` and checks each against SPEC §2.
    static func tryEverything(in area: AreaUnderTest, options: [String] = []) throws {
        try withMountedContainer(options: options, beforeMounting: { try prepare($0, area) }) { container in
            let probe = try Probe(container)
            for attempt in attempts {
                let scene = Scene(container, area, attempt.slug)
                let label = "\(attempt.slug) in \(area.name)"
                let named = attempt.names.map(scene.path)
                if let expected = area.denial(attempt.kind) {
                    let denial = Denial(
                        errno: expected.errno, operation: attempt.audited, paths: named,
                        areas: attempt.names.map(scene.areaName), rule: expected.rule)
                    try probe.denied(label, denial, watching: named + [scene.file, scene.directory, scene.outside]) {
                        attempt.act(scene)
                    }
                } else if probe.allowed(label, { attempt.act(scene) }) {
                    attempt.effect(scene)
                }
            }
            // The kernel's view agrees with the store, also where everything was denied.
            expectMountAgreesWithStore(container, area.directory)
            expectMountAgreesWithStore(container, "Documents/outside")
            try probe.finish()
        }
    }

    @Test("every operation in the bundle is EPERM, audited, and the bundle stays byte-identical")
    func bundle() throws {
        try Self.tryEverything(in: .bundle)
    }

    /// With `-o writeback` the kernel caches writes and opens files for itself: the rules
    /// must hold the same.
    @Test(
        "with the kernel's writeback cache the bundle is as read-only and Documents as writable",
        arguments: [AreaUnderTest.bundle, AreaUnderTest.writable[0]])
    func writeback(_ area: AreaUnderTest) throws {
        try Self.tryEverything(in: area, options: ["writeback"])
    }

    @Test("the inbox may be read, emptied and moved out of; anything else is EACCES")
    func inbox() throws {
        try Self.tryEverything(in: .inbox)
    }

    @Test(
        "data, cache and temporary allow every operation, reach the store, and audit nothing",
        arguments: AreaUnderTest.writable)
    func writable(_ area: AreaUnderTest) throws {
        try Self.tryEverything(in: area)
    }

    /// The root and each standard directory itself: readable, but never changed, removed,
    /// moved or replaced (EPERM).
    @Test(
        "the structure is fixed",
        arguments: [
            "", "Documents", "Documents/Inbox", "Library",
            "Library/Application Support", "Library/Preferences",
            "Library/Caches", "tmp",
        ])
    func structure(_ directory: String) throws {
        // A writable folder that is neither the directory nor inside it (the kernel itself
        // refuses to move a directory into its own subtree).
        let elsewhere = directory.hasPrefix("tmp") ? "Documents" : "tmp"
        let elsewhereArea = elsewhere == "tmp" ? "temporary" : "data"
        try withMountedContainer(beforeMounting: { container in
            try makeStoredDirectory(container, "\(elsewhere)/over")
            try putInStore(container, "\(elsewhere)/file", "file\n")
        }) { container in
            let probe = try Probe(container)
            let path = container.mounted(directory)
            func denial(_ operation: String, _ paths: [String] = [directory], _ areas: [String] = ["structure"]) -> Denial {
                Denial(errno: EPERM, operation: operation, paths: paths, areas: areas, rule: "structureIsFixed")
            }
            let watched = [directory, "\(elsewhere)/over", "\(elsewhere)/file"]

            // Reading is allowed.
            var info = stat()
            #expect(stat(path, &info) == 0 && info.st_mode & S_IFMT == S_IFDIR)
            #expect((try? FileManager.default.contentsOfDirectory(atPath: path)) != nil)
            var buffer = [UInt8](repeating: 0, count: 64)
            #expect(outcome(buffer.withUnsafeMutableBytes { getxattr(path, "user.missing", $0.baseAddress, $0.count) }) == ENODATA)

            try probe.denied("chmod \(directory)", denial("chmod"), watching: watched) { outcome(chmod(path, 0o700)) }
            try probe.denied("fchmod \(directory)", denial("chmod"), watching: watched) {
                withOpened(path, O_RDONLY | O_DIRECTORY) { outcome(fchmod($0, 0o700)) }
            }
            try probe.denied("chown \(directory)", denial("chown"), watching: watched) { outcome(chown(path, 1000, 1000)) }
            try probe.denied("utimensat \(directory)", denial("utimens"), watching: watched) {
                outcome(utimensat(AT_FDCWD, path, times(setTime), 0))
            }
            try probe.denied("utimensat now \(directory)", denial("utimens"), watching: watched) {
                outcome(utimensat(AT_FDCWD, path, nil, 0))
            }
            try probe.denied("setxattr \(directory)", denial("setxattr"), watching: watched) {
                outcome(setxattr(path, "user.test", "v", 1, 0))
            }
            try probe.denied("removexattr \(directory)", denial("removexattr"), watching: watched) {
                outcome(removexattr(path, "user.test"))
            }
            // The root is the mount point: the kernel refuses to remove or move it (EBUSY)
            // before the filesystem is asked.
            if !directory.isEmpty {
                try probe.denied("rmdir \(directory)", denial("rmdir"), watching: watched) { outcome(rmdir(path)) }
                let moved = "\(elsewhere)/moved"
                try probe.denied(
                    "rename \(directory) away", denial("rename", [directory, moved], ["structure", elsewhereArea]),
                    watching: watched + [moved]
                ) {
                    outcome(rename(path, container.mounted(moved)))
                }
                try probe.denied(
                    "rename a folder over \(directory)",
                    denial("rename", ["\(elsewhere)/over", directory], [elsewhereArea, "structure"]), watching: watched
                ) {
                    outcome(rename(container.mounted("\(elsewhere)/over"), path))
                }
                try probe.denied(
                    "exchange a file with \(directory)",
                    denial("rename", ["\(elsewhere)/file", directory], [elsewhereArea, "structure"]), watching: watched
                ) {
                    outcome(clinux_renameat2(AT_FDCWD, container.mounted("\(elsewhere)/file"), AT_FDCWD, path, clinux_RENAME_EXCHANGE))
                }
            } else {
                // Nothing can be created at the root.
                let fresh = container.mounted("new")
                let rootDenial = { (operation: String) in denial(operation, ["new"], ["structure"]) }
                try probe.denied("create at the root", rootDenial("create"), watching: ["new"]) {
                    withOpened(fresh, O_CREAT | O_WRONLY)
                }
                try probe.denied("creat at the root", rootDenial("create"), watching: ["new"]) {
                    let fd = creat(fresh, 0o644)
                    if fd >= 0 { close(fd) }
                    return fd < 0 ? errno : 0
                }
                try probe.denied("mkdir at the root", rootDenial("mkdir"), watching: ["new"]) { outcome(mkdir(fresh, 0o755)) }
                try probe.denied("mkfifo at the root", rootDenial("mknod"), watching: ["new"]) { outcome(mkfifo(fresh, 0o644)) }
                try probe.denied("symlink at the root", rootDenial("symlink"), watching: ["new"]) { outcome(symlink("Documents", fresh)) }
                try probe.denied(
                    "link at the root", denial("link", ["tmp/file", "new"], ["temporary", "structure"]),
                    watching: ["new", "tmp/file"]
                ) {
                    outcome(link(container.mounted("tmp/file"), fresh))
                }
                try probe.denied(
                    "rename to the root", denial("rename", ["tmp/file", "new"], ["temporary", "structure"]),
                    watching: ["new", "tmp/file"]
                ) {
                    outcome(rename(container.mounted("tmp/file"), fresh))
                }
                try probe.denied(
                    "rename a folder to the root", denial("rename", ["tmp/over", "new"], ["temporary", "structure"]),
                    watching: ["new", "tmp/over"]
                ) {
                    outcome(rename(container.mounted("tmp/over"), fresh))
                }
            }
            #expect(status(container.stored(directory)).map { $0.st_mode & S_IFMT == S_IFDIR } == true)
            try probe.finish()
        }
    }

    /// Listing is reading: a folder larger than one kernel buffer lists every entry once,
    /// and never the store's `CACHEDIR.TAG`, however the entries fall across buffers.
    @Test("large folders list completely", arguments: ["Documents", "Library/Caches", "tmp"])
    func largeFolders(_ directory: String) throws {
        try withMountedContainer { container in
            let probe = try Probe(container)
            let names = (0..<1000).map { String(format: "%04d-", $0) + String(repeating: "n", count: 150) }
            let made = try runProgram(
                [
                    "python3", "-c", "import sys, os\nfor n in sys.argv[2:]: open(os.path.join(sys.argv[1], n), 'w').close()",
                    container.mounted(directory),
                ] + names)
            #expect(made.status == 0, "\(made)")
            let expected = Set(names).union(directory == "Documents" ? ["Inbox"] : [])
            let listed = try FileManager.default.contentsOfDirectory(atPath: container.mounted(directory))
            #expect(listed.count == expected.count && Set(listed) == expected, "listed \(listed.count) of \(expected.count)")
            let ls = try runProgram(["ls", "-f", "-A", container.mounted(directory)])
            #expect(ls.stdout.split(separator: "\n").count == expected.count, "ls -f lists \(ls.stdout.split(separator: "\n").count)")
            let stored = Set(try FileManager.default.contentsOfDirectory(atPath: container.stored(directory)))
            #expect(stored.subtracting(["CACHEDIR.TAG"]) == expected)
            try probe.finish()
        }
    }

    /// SPEC §2: a denial's record names the process (its pid and name), also when one of
    /// its threads, under a name of its own, made the call.
    @Test("the audit record names the process, not the thread that was denied")
    func auditNamesTheProcess() throws {
        try withMountedContainer { container in
            let probe = try Probe(container)
            let script = """
                import ctypes, os, sys, threading
                libc = ctypes.CDLL(None, use_errno=True)
                def worker():
                    libc.prctl(15, b"worker", 0, 0, 0)  # PR_SET_NAME: the thread's own name
                    try:
                        open(sys.argv[1], 'w')
                    except PermissionError:
                        print(os.getpid())
                thread = threading.Thread(target=worker)
                thread.start()
                thread.join()
                print(open('/proc/self/comm').read().strip())
                """
            let result = try runProgram(["python3", "-c", script, container.mounted("Demo.app/Info.plist")])
            let lines = result.stdout.split(separator: "\n").map(String.init)
            #expect(result.status == 0 && lines.count == 2, "\(result)")
            let records = try probe.takeAuditRecords(atLeast: 1)
            #expect(records.count == 1)
            if let record = records.first, lines.count == 2 {
                #expect((record["pid"] as? NSNumber)?.stringValue == lines[0], "the process's pid: \(record)")
                #expect(record["process"] as? String == lines[1], "the process's name: \(record)")
            }
            try probe.finish()
        }
    }

    /// What the policy allows reaches the store, whose errno comes back unchanged; `statfs`
    /// and `O_DIRECT` work (SPEC §2, last rules).
    @Test("the store's own errors pass through, statfs and O_DIRECT work")
    func storeErrorsPassThrough() throws {
        try withMountedContainer(beforeMounting: { container in
            try putInStore(container, "Documents/full/file", "x\n")
            try putInStore(container, "Documents/plain", "plain\n")
        }) { container in
            let probe = try Probe(container)
            let m = container.mounted
            probe.fails("open a missing file", with: ENOENT) { withOpened(m("Documents/missing"), O_RDONLY) }
            probe.fails("unlink a missing file", with: ENOENT) { outcome(unlink(m("Documents/missing"))) }
            probe.fails("rename a missing file", with: ENOENT) { outcome(rename(m("Documents/missing"), m("Documents/x"))) }
            probe.fails("open a missing file in the bundle", with: ENOENT) { withOpened(m("Demo.app/missing"), O_RDONLY) }
            probe.fails("rmdir a full folder", with: ENOTEMPTY) { outcome(rmdir(m("Documents/full"))) }
            probe.fails("mkdir an existing name", with: EEXIST) { outcome(mkdir(m("Documents/full"), 0o755)) }
            probe.fails("O_EXCL on an existing file", with: EEXIST) { withOpened(m("Documents/plain"), O_CREAT | O_EXCL | O_WRONLY) }
            probe.fails("RENAME_NOREPLACE onto an existing file", with: EEXIST) {
                outcome(clinux_renameat2(AT_FDCWD, m("Documents/plain"), AT_FDCWD, m("Documents/full/file"), clinux_RENAME_NOREPLACE))
            }
            probe.fails("a file used as a folder", with: ENOTDIR) { withOpened(m("Documents/plain/x"), O_RDONLY) }
            probe.fails("rmdir a file", with: ENOTDIR) { outcome(rmdir(m("Documents/plain"))) }
            var buffer = [UInt8](repeating: 0, count: 64)
            probe.fails("getxattr of a missing attribute", with: ENODATA) {
                outcome(buffer.withUnsafeMutableBytes { getxattr(m("Documents/plain"), "user.missing", $0.baseAddress, $0.count) })
            }
            probe.fails("getxattr of a missing attribute in the bundle", with: ENODATA) {
                outcome(buffer.withUnsafeMutableBytes { getxattr(m("Demo.app/Info.plist"), "user.missing", $0.baseAddress, $0.count) })
            }
            probe.fails("removexattr of a missing attribute", with: ENODATA) { outcome(removexattr(m("Documents/plain"), "user.missing")) }

            // statfs reports the store's filesystem.
            var mounted = statvfs(), stored = statvfs()
            #expect(statvfs(container.mountpoint, &mounted) == 0)
            #expect(statvfs(container.store, &stored) == 0)
            #expect(mounted.f_blocks == stored.f_blocks && mounted.f_bsize == stored.f_bsize)
            let df = try runProgram(["df", container.mountpoint])
            #expect(df.status == 0, "df: \(df)")

            // O_DIRECT: an aligned write and read through the mount.
            let size = 8192
            var raw: UnsafeMutableRawPointer?
            #expect(posix_memalign(&raw, 4096, size) == 0)
            defer { free(raw) }
            guard let raw else { return }
            memset(raw, 0x5A, size)
            probe.allowed("O_DIRECT write") {
                withOpened(m("Documents/direct"), O_CREAT | O_WRONLY | clinux_O_DIRECT) { outcome(write($0, raw, size)) }
            }
            memset(raw, 0, size)
            probe.allowed("O_DIRECT read") {
                withOpened(m("Documents/direct"), O_RDONLY | clinux_O_DIRECT) { outcome(read($0, raw, size)) }
            }
            #expect(UnsafeRawBufferPointer(start: raw, count: size).allSatisfy { $0 == 0x5A })
            #expect(contents(container.stored("Documents/direct")) == [UInt8](repeating: 0x5A, count: size))
            try probe.finish()
        }
    }
}

/// Expects the mount to show what the store holds below `relative`: the same names, types,
/// modes, owners, sizes, link counts, contents and symlink targets (the kernel's caches agree
/// with the store after changes made through the mount).
func expectMountAgreesWithStore(
    _ container: MountedContainer, _ relative: String,
    sourceLocation: SourceLocation = #_sourceLocation
) {
    let hidden: Set<String> = relative == "Library/Caches" || relative == "tmp" ? ["CACHEDIR.TAG"] : []
    // A folder neither side can list is a failure, not two empty listings that agree.
    let stored: Set<String>, mounted: Set<String>
    do {
        stored = Set(try FileManager.default.contentsOfDirectory(atPath: container.stored(relative))).subtracting(hidden)
        mounted = Set(try FileManager.default.contentsOfDirectory(atPath: container.mounted(relative)))
    } catch {
        Issue.record("\(relative): cannot list: \(error)", sourceLocation: sourceLocation)
        return
    }
    #expect(
        mounted == stored, "\(relative): the mount lists \(mounted.sorted()), the store \(stored.sorted())", sourceLocation: sourceLocation)
    for name in stored.intersection(mounted).sorted() {
        let path = relative + "/" + name
        guard let s = status(container.stored(path)), let m = status(container.mounted(path)) else {
            Issue.record("\(path): cannot stat", sourceLocation: sourceLocation)
            continue
        }
        let owner = { (i: stat) in "mode \(String(i.st_mode, radix: 8)) owner \(i.st_uid):\(i.st_gid)" }
        let describe = { (i: stat) in owner(i) + " size \(i.st_size) links \(i.st_nlink)" }
        let type = s.st_mode & S_IFMT
        if type == S_IFDIR {
            // A directory's size and link count are left to the kernel; its mode and owner are not.
            #expect(owner(m) == owner(s), "\(path): the mount shows \(owner(m)), the store \(owner(s))", sourceLocation: sourceLocation)
            expectMountAgreesWithStore(container, path, sourceLocation: sourceLocation)
        } else {
            #expect(
                describe(m) == describe(s), "\(path): the mount shows \(describe(m)), the store \(describe(s))",
                sourceLocation: sourceLocation)
        }
        if type == S_IFREG {
            #expect(
                contents(container.mounted(path)) == contents(container.stored(path)), "\(path): contents differ",
                sourceLocation: sourceLocation)
        }
        if type == S_IFLNK {
            #expect(
                linkTarget(container.mounted(path)) == linkTarget(container.stored(path)), "\(path): targets differ",
                sourceLocation: sourceLocation)
        }
    }
}
