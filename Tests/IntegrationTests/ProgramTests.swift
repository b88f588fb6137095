import Foundation
import Glibc
import Testing

/// Unmodified programs in a mounted container: they work in the writable areas, and fail
/// cleanly (non-zero exit, nothing changed) when they try to write into the bundle.
@Suite("Programs")
struct ProgramTests {
    /// Runs a shell command in `directory`; records an issue with its output if it fails.
    @discardableResult
    static func shell(
        _ script: String, _ arguments: [String] = [], in directory: String,
        sourceLocation: SourceLocation = #_sourceLocation
    ) throws -> ProgramResult {
        let result = try runProgram(["sh", "-c", script, "sh"] + arguments, directory: directory)
        #expect(result.status == 0, "\(script): \(result)", sourceLocation: sourceLocation)
        return result
    }

    /// A small tree on the host: text, a 200 KiB binary, a symlink, a private file.
    static func makeSourceTree(_ container: MountedContainer) throws -> String {
        let source = container.base + "/source"
        try shell(
            """
            mkdir -p src/b/d && printf 'alpha\\n' > src/a.txt && printf 'charlie\\n' > src/b/c.txt \
            && head -c 204800 /dev/urandom > src/b/d/e.bin && ln -s c.txt src/b/link && chmod 600 src/a.txt \
            && mkdir src/empty
            """, in: container.base)
        try FileManager.default.moveItem(atPath: container.base + "/src", toPath: source)
        return source
    }

    /// Expects two trees to hold the same names, types, modes, symlink targets and contents.
    static func expectSameTree(_ left: String, _ right: String, sourceLocation: SourceLocation = #_sourceLocation) throws {
        guard status(left) != nil, status(right) != nil else {
            Issue.record("\(left) or \(right) is missing", sourceLocation: sourceLocation)
            return
        }
        let diff = try runProgram(["diff", "-r", "--no-dereference", left, right])
        #expect(diff.status == 0, "diff -r \(left) \(right): \(diff)", sourceLocation: sourceLocation)
        let listing = "find . -printf '%p %y %m %l\\n' | LC_ALL=C sort"
        let a = try runProgram(["sh", "-c", listing], directory: left).stdout
        let b = try runProgram(["sh", "-c", listing], directory: right).stdout
        #expect(a == b, "\(left) and \(right) differ:\n\(a)\n\(b)", sourceLocation: sourceLocation)
    }

    @Test("cp, mv, tar and rm -rf work", arguments: ["Documents", "Library/Caches"])
    func coreutils(_ directory: String) throws {
        try withMountedContainer { container in
            let probe = try Probe(container)
            let source = try Self.makeSourceTree(container)
            let here = container.mounted(directory)
            let stored = container.stored(directory)

            try Self.shell("cp -a \"$1\" tree", [source], in: here)
            try Self.expectSameTree(source, stored + "/tree")
            try Self.expectSameTree(source, here + "/tree")
            try Self.shell(
                "cp tree/a.txt tree/a.copy && cp -r tree/b tree/b.copy && cp \"$1\" .",
                [container.mounted("Demo.app/Info.plist")], in: here)
            #expect(contents(stored + "/Info.plist") == Scene.bundleFileContent, "cp out of the bundle")
            #expect(contents(stored + "/tree/a.copy") == bytes("alpha\n"))
            try Self.expectSameTree(stored + "/tree/b", stored + "/tree/b.copy")

            // mv within the area, into another area and back.
            let other = container.mounted(directory == "Documents" ? "Library/Caches" : "Documents")
            try Self.shell("mv tree/a.copy tree/moved.txt && mv tree/b.copy \"$1\"/b && mv \"$1\"/b ./b-back", [other], in: here)
            #expect(contents(stored + "/tree/moved.txt") == bytes("alpha\n"))
            #expect(status(stored + "/tree/a.copy") == nil)
            try Self.expectSameTree(source + "/b", stored + "/b-back")

            // tar: create from the mount, list, extract into the mount.
            try Self.shell("tar -cf tree.tar tree && tar -tf tree.tar > list.txt && mkdir x && tar -xpf tree.tar -C x", in: here)
            try Self.expectSameTree(stored + "/tree", stored + "/x/tree")
            #expect(String(decoding: contents(stored + "/list.txt") ?? [], as: UTF8.self).contains("tree/b/d/e.bin"))
            let hostTar = try runProgram(["tar", "-tf", stored + "/tree.tar"])
            #expect(hostTar.status == 0 && hostTar.stdout.contains("tree/b/link"), "the archive in the store: \(hostTar)")

            // rm -rf.
            try Self.shell("rm -rf tree x b-back tree.tar", in: here)
            for gone in ["tree", "x", "b-back", "tree.tar"] {
                #expect(status(stored + "/" + gone) == nil, "\(gone) is still in the store")
            }
            expectMountAgreesWithStore(container, directory)
            try probe.finish()
        }
    }

    @Test("sqlite3 creates, fills and queries a database", arguments: ["Documents", "Library/Caches"])
    func sqlite(_ directory: String) throws {
        try withMountedContainer { container in
            let probe = try Probe(container)
            let here = container.mounted(directory)
            try Self.shell(
                """
                sqlite3 app.db 'create table notes(id integer primary key, body text);' \
                  'with recursive n(i) as (select 1 union all select i + 1 from n where i < 1000) insert into notes(body) select printf("note %d", i) from n;'
                """, in: here)
            let query = try Self.shell("sqlite3 app.db 'select count(*), sum(id) from notes;' 'pragma integrity_check;'", in: here)
            #expect(query.stdout == "1000|500500\nok\n")
            // Write-ahead log: more files, shared memory, checkpoints.
            let wal = try Self.shell(
                """
                sqlite3 wal.db 'pragma journal_mode=wal;' 'create table t(a);' 'insert into t values (1), (2), (3);' \
                  'update t set a = a * 10;' 'select sum(a) from t;' 'pragma wal_checkpoint(truncate);'
                """, in: here)
            #expect(wal.stdout.hasPrefix("wal\n60\n"), "\(wal)")
            let update = try Self.shell("sqlite3 app.db 'delete from notes where id > 10; vacuum;' 'select count(*) from notes;'", in: here)
            #expect(update.stdout == "10\n")
            // The store holds a sound database.
            let stored = try runProgram([
                "sqlite3", container.stored(directory) + "/app.db", "select count(*) from notes; pragma integrity_check;",
            ])
            #expect(stored.stdout == "10\nok\n", "\(stored)")
            let storedWal = try runProgram(["sqlite3", container.stored(directory) + "/wal.db", "select sum(a) from t;"])
            #expect(storedWal.stdout == "60\n", "\(storedWal)")
            try probe.finish()
        }
    }

    @Test("git init, add, commit, gc and a local clone work in Documents")
    func git() throws {
        try withMountedContainer { container in
            let probe = try Probe(container)
            let here = container.mounted("Documents")
            let git = "git -c user.name=Tester -c user.email=tester@example.com -c init.defaultBranch=main"
            try Self.shell(
                """
                \(git) init -q repo && cd repo && printf 'hello\\n' > README && mkdir src && printf 'code\\n' > src/main.c \
                && \(git) add . && \(git) commit -q -m first \
                && printf 'more\\n' >> README && git mv src/main.c src/app.c && \(git) commit -q -am second \
                && \(git) gc -q && \(git) fsck --strict
                """, in: here)
            let log = try Self.shell("git log --format=%s", in: here + "/repo")
            #expect(log.stdout == "second\nfirst\n")
            let status = try Self.shell("git status --porcelain", in: here + "/repo")
            #expect(status.stdout.isEmpty, "the work tree is clean: \(status)")
            // A local clone hard-links objects between Documents and Caches.
            try Self.shell("git clone -q repo ../Library/Caches/clone && git -C ../Library/Caches/clone log --format=%s", in: here)
            // The store holds a sound repository.
            let stored = try runProgram(["git", "-C", container.stored("Documents/repo"), "log", "--format=%s"])
            #expect(stored.stdout == "second\nfirst\n", "\(stored)")
            let fsck = try runProgram(["git", "-C", container.stored("Library/Caches/clone"), "fsck", "--strict"])
            #expect(fsck.status == 0, "\(fsck)")
            #expect(contents(container.stored("Documents/repo/README")) == bytes("hello\nmore\n"))
            try probe.finish()
        }
    }

    @Test("python3 writes, reads, replaces, maps and removes files", arguments: ["Documents", "tmp"])
    func python(_ directory: String) throws {
        try withMountedContainer { container in
            let probe = try Probe(container)
            let script = """
                import hashlib, mmap, os, shutil, sys
                d = os.path.join(sys.argv[1], 'py')
                os.makedirs(os.path.join(d, 'a', 'b'))
                data = os.urandom(3 << 20)
                with open(os.path.join(d, 'big.bin'), 'wb') as f:
                    f.write(data); f.flush(); os.fsync(f.fileno())
                with open(os.path.join(d, 'big.bin'), 'rb') as f:
                    assert f.read() == data
                tmp = os.path.join(d, 'settings.json.tmp')
                for version in (1, 2):
                    with open(tmp, 'w') as f:
                        f.write('{"v": %d}' % version)
                    os.replace(tmp, os.path.join(d, 'settings.json'))
                assert open(os.path.join(d, 'settings.json')).read() == '{"v": 2}'
                os.rename(os.path.join(d, 'big.bin'), os.path.join(d, 'a', 'b', 'big.bin'))
                shutil.copytree(os.path.join(d, 'a'), os.path.join(d, 'copy'))
                with open(os.path.join(d, 'mapped'), 'wb') as f:
                    f.write(b'\\0' * 8192)
                with open(os.path.join(d, 'mapped'), 'r+b') as f:
                    m = mmap.mmap(f.fileno(), 8192)
                    m[0:5] = b'hello'
                    m.flush(); m.close()
                for line in ('one\\n', 'two\\n'):
                    with open(os.path.join(d, 'log'), 'a') as f:
                        f.write(line)
                with open(os.path.join(d, 'rw'), 'w+b') as f:
                    f.write(b'0123456789'); f.seek(3); f.write(b'abc'); f.seek(0); assert f.read() == b'012abc6789'
                    f.truncate(5)
                shutil.rmtree(os.path.join(d, 'copy'))
                print(hashlib.sha256(data).hexdigest())
                """
            let result = try runProgram(["python3", "-c", script, container.mounted(directory)])
            #expect(result.status == 0, "python3: \(result)")
            let stored = container.stored(directory) + "/py"
            let digest = try runProgram(["sha256sum", stored + "/a/b/big.bin"]).stdout.prefix(64)
            #expect(String(digest) + "\n" == result.stdout)
            #expect(contents(stored + "/settings.json") == bytes("{\"v\": 2}"))
            #expect(status(stored + "/settings.json.tmp") == nil)
            #expect(contents(stored + "/mapped").map { Array($0.prefix(5)) } == bytes("hello"))
            #expect(contents(stored + "/log") == bytes("one\ntwo\n"))
            #expect(contents(stored + "/rw") == bytes("012ab"))
            #expect(status(stored + "/copy") == nil)
            try probe.finish()
        }
    }

    /// Programs writing into the bundle, each with the process name the audit log shows.
    static let bundleWriters: [(arguments: [String], process: String)] = [
        (["cp", "/etc/hostname", "Demo.app/hostname"], "cp"),
        (["cp", "Documents/f", "Demo.app/Info.plist"], "cp"),
        (["cp", "-r", "Documents/tree", "Demo.app/res/"], "cp"),
        (["mv", "Demo.app/Info.plist", "Documents/"], "mv"),
        (["mv", "Documents/f", "Demo.app/res/"], "mv"),
        (["rm", "-f", "Demo.app/Info.plist"], "rm"),
        (["rm", "-rf", "Demo.app"], "rm"),
        (["tar", "-xf", "Documents/t.tar", "-C", "Demo.app"], "tar"),
        (["tar", "-cf", "Demo.app/out.tar", "-C", "Documents", "f"], "tar"),
        (["touch", "Demo.app/Info.plist"], "touch"),
        (["touch", "Demo.app/new"], "touch"),
        (["sh", "-c", "echo x >> Demo.app/Info.plist"], "sh"),
        (["sqlite3", "Demo.app/app.db", "create table t(a);"], "sqlite3"),
        (["git", "init", "-q", "Demo.app/repo"], "git"),
        (["python3", "-c", "open('Demo.app/Info.plist', 'a').write('x')"], "python3"),
        (["python3", "-c", "import os; os.rename('Documents/f', 'Demo.app/f')"], "python3"),
        (["chmod", "777", "Demo.app/Info.plist"], "chmod"),
        (["setfattr", "-n", "user.x", "-v", "1", "Demo.app/Info.plist"], "setfattr"),
        (["truncate", "-s", "0", "Demo.app/res/data.txt"], "truncate"),
        (["ln", "-s", "x", "Demo.app/sym"], "ln"),
        (["mkdir", "Demo.app/newdir"], "mkdir"),
        (["sed", "-i", "s/demo/pwned/", "Demo.app/Info.plist"], "sed"),
        (["dd", "if=/dev/zero", "of=Demo.app/Info.plist", "bs=1", "count=1", "conv=notrunc", "status=none"], "dd"),
    ]

    @Test("programs writing into the bundle fail, change nothing and are audited")
    func programsCannotWriteTheBundle() throws {
        try withMountedContainer(beforeMounting: { container in
            try putInStore(container, "Documents/f", "f\n")
            try putInStore(container, "Documents/tree/x", "x\n")
            _ = try runProgram(["tar", "-cf", container.stored("Documents/t.tar"), "-C", container.stored("Documents"), "tree"])
        }) { container in
            let probe = try Probe(container)
            for (arguments, process) in Self.bundleWriters {
                let command = arguments.joined(separator: " ")
                let result = try runProgram(arguments, directory: container.mountpoint)
                #expect(result.status != 0, "\(command) must fail: \(result)")
                let records = try probe.takeAuditRecords(atLeast: 1)
                #expect(!records.isEmpty, "\(command): not audited")
                for record in records {
                    let paths = record["paths"] as? [String] ?? []
                    // python3 may run under a versioned name (python3.11).
                    #expect(
                        (record["process"] as? String)?.hasPrefix(process) == true
                            && record["errno"] as? String == "EPERM" && record["rule"] as? String == "bundleIsReadOnly"
                            && paths.contains { $0 == "Demo.app" || $0.hasPrefix("Demo.app/") },
                        "\(command): \(record)")
                }
                try probe.expectBundleUnchanged(command)
            }
            #expect(contents(container.stored("Documents/f")) == bytes("f\n"))
            try probe.finish()
        }
    }
}
