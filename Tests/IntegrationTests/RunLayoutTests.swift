import ContainerStore
import Foundation
import Glibc
import Testing

/// `run --layout ios` (issue #30, docs/run.md "The iOS layout"): the data container as HOME
/// under a UUID, the bundle apart under another, `/var` -> `/private/var`; the UUIDs stable
/// from run to run and changed by update, a reinstall, a restore and `--relocate`.
@Suite("RunLayout", .serialized)
struct RunLayoutTests {
    static let runners: [String?] = [nil, "cfs-alice"]
    static let uuid = "[0-9A-F]{8}-[0-9A-F]{4}-[0-9A-F]{4}-[0-9A-F]{4}-[0-9A-F]{12}"

    /// The lines the program prints, `name=value`.
    private func values(_ text: String) -> [String: String] {
        var values: [String: String] = [:]
        for line in text.split(separator: "\n") {
            let parts = line.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            if parts.count == 2 { values[String(parts[0])] = String(parts[1]) }
        }
        return values
    }

    static let probe = """
        echo "home=$HOME"; echo "pwd=$(pwd)"; echo "bundle=$CONTAINERFS_BUNDLE_PATH"
        echo "entries=$(ls -A "$HOME" | tr '\\n' ' ')"; echo "covered=$(ls -A "$HOME/Demo.app" | wc -l)"
        echo "var=$(readlink /var)"; echo "resource=$(cat "$CONTAINERFS_BUNDLE_PATH/res/data.txt")"
        touch "$CONTAINERFS_BUNDLE_PATH/new" 2>/dev/null || echo "bundle write refused"
        echo saved > tmp/draft && mv tmp/draft Documents/note && echo "via var=$(cat "/var${HOME#/private/var}/Documents/note")"
        test -e /home/app || echo "no /home/app"
        """

    @Test(arguments: runners)
    func theIOSLayoutShowsTheContainerAtIOSPaths(runner: String?) throws {
        let container = try MountedContainer(user: runner)
        let result = try runProgram([containerfsBinary, "run", container.store, "--layout", "ios", "--", "sh", "-c", Self.probe], user: runner)
        #expect(result.status == 0, "\(result)")
        let seen = values(result.stdout)
        let home = try #require(seen["home"])
        #expect(home.wholeMatch(of: try Regex("/private/var/mobile/Containers/Data/Application/\(Self.uuid)")) != nil, "\(result)")
        #expect(seen["pwd"] == home)
        #expect(seen["bundle"]?.wholeMatch(of: try Regex("/private/var/containers/Bundle/Application/\(Self.uuid)/Demo.app")) != nil, "\(result)")
        #expect(seen["entries"] == "Demo.app Documents Library tmp ", "\(result)")
        #expect(seen["covered"] == "0", "the bundle is not in the data container: \(result)")
        #expect(seen["var"] == "private/var" && seen["via var"] == "saved", "\(result)")
        #expect(seen["resource"] == "resource", "\(result)")
        #expect(result.stdout.contains("bundle write refused\n") && result.stdout.contains("no /home/app\n"), "\(result)")
        #expect(result.stderr.contains("containerfs: HOME \(home), bundle \(seen["bundle"] ?? "")\n"), "\(result)")
        #expect(result.stderr.contains(denialSummary(1, container)), "the bundle's rule, audited: \(result)")
        #expect(try String(contentsOfFile: container.stored("Documents/note"), encoding: .utf8) == "saved\n")
        // Stable: the same paths next time, as recorded in the store.
        let again = values(try runProgram([containerfsBinary, "run", container.store, "--layout", "ios", "--", "sh", "-c", Self.probe], user: runner).stdout)
        #expect(again["home"] == home && again["bundle"] == seen["bundle"])
        let recorded = try String(contentsOfFile: container.stored(".containerfs/ios-uuids"), encoding: .utf8)
        #expect(recorded == "\(home.split(separator: "/").last ?? "")\n\(seen["bundle"]?.split(separator: "/").dropLast().last ?? "")\n")
        // /var and /private are the layout's own: a --bind-ro there is refused.
        let hiding = try runProgram([containerfsBinary, "run", container.store, "--layout", "ios", "--bind-ro", "/var/lib", "--", "true"], user: runner)
        #expect(hiding.status == 64 && hiding.stderr.contains("would hide the container under --layout ios"), "\(hiding)")
        // The default layout is as it was.
        let plain = try runProgram([containerfsBinary, "run", container.store, "--", "sh", "-c", "echo \"home=$HOME\"; echo \"bundle=$CONTAINERFS_BUNDLE_PATH\""], user: runner)
        #expect(plain.stdout == "home=/home/app\nbundle=\n", "\(plain)")
        try expectCleanedUp(container)
    }

    /// A program that records `$HOME/Documents/x` in SQLite at one launch and opens it at
    /// the next: under the iOS layout it works until `update`, then the path is gone, as on
    /// a device; the relative path it also recorded works, and the default layout never
    /// breaks it. A reinstall after offload, a restore and --relocate move the container too.
    @Test func anAbsolutePathStoredBeforeAnUpdateBreaksAfterIt() throws {
        let program = """
            if [ "$1" = write ]; then
              echo data > Documents/x
              sqlite3 Documents/paths.db "create table if not exists t(p); delete from t; insert into t values('$HOME/Documents/x'), ('Documents/x');"
            else
              cat "$(sqlite3 Documents/paths.db "select p from t where rowid = $2")"
            fi
            """
        func run(_ container: MountedContainer, _ layout: [String], _ arguments: [String]) throws -> ProgramResult {
            try containerfsRun(container, layout, ["sh", "-c", program, "sh"] + arguments)
        }
        func update(_ container: MountedContainer) throws {
            try Data("version 2\n".utf8).write(to: URL(fileURLWithPath: container.base + "/Demo.app/res/data.txt"))
            let updated = try containerfs(["update", container.store, "--bundle", container.base + "/Demo.app"])
            #expect(updated.status == 0, "\(updated)")
        }
        let ios = try MountedContainer()
        #expect(try run(ios, ["--layout", "ios"], ["write"]).status == 0)
        #expect(try run(ios, ["--layout", "ios"], ["read", "1"]).stdout == "data\n", "stable across launches")
        let before = try String(contentsOfFile: ios.stored(".containerfs/ios-uuids"), encoding: .utf8)
        try update(ios)
        let broken = try run(ios, ["--layout", "ios"], ["read", "1"])
        #expect(broken.status != 0 && broken.stderr.contains("No such file or directory"), "the absolute path survived the update: \(broken)")
        #expect(try run(ios, ["--layout", "ios"], ["read", "2"]).stdout == "data\n", "the relative path works")
        let afterUpdate = try String(contentsOfFile: ios.stored(".containerfs/ios-uuids"), encoding: .utf8)
        #expect(afterUpdate != before)
        let bundleUUID = { (record: String) in record.split(separator: "\n").last.map(String.init) ?? "" }
        #expect(bundleUUID(afterUpdate) != bundleUUID(before), "the bundle moved too")

        let plain = try MountedContainer()
        #expect(try run(plain, [], ["write"]).status == 0)
        try update(plain)
        #expect(try run(plain, [], ["read", "1"]).stdout == "data\n", "the default layout keeps /home/app")

        // Offload and reinstall: new UUIDs.
        #expect(try containerfs(["offload", ios.store]).status == 0)
        #expect(try containerfs(["update", ios.store, "--bundle", ios.base + "/Demo.app"]).status == 0)
        #expect(try run(ios, ["--layout", "ios"], ["read", "2"]).status == 0)
        let afterReinstall = try String(contentsOfFile: ios.stored(".containerfs/ios-uuids"), encoding: .utf8)
        #expect(afterReinstall != afterUpdate)
        // Restored to another device (a new store): new UUIDs, and the absolute path is gone.
        let archive = ios.base + "/backup.tar"
        #expect(try containerfs(["backup", ios.store, archive]).status == 0)
        let restoredPath = ios.base + "/restored"
        #expect(try containerfs(["restore", archive, restoredPath, "--bundle", ios.base + "/Demo.app"]).status == 0)
        let restored = try runProgram([containerfsBinary, "run", restoredPath, "--layout", "ios", "--", "sh", "-c", program, "sh", "read", "1"])
        #expect(restored.status != 0, "\(restored)")
        #expect(try String(contentsOfFile: restoredPath + "/.containerfs/ios-uuids", encoding: .utf8) != afterReinstall)

        // --relocate: a new HOME at every launch; without it, one HOME for all.
        func homes(_ options: [String]) throws -> Set<String> {
            let result = try containerfsRun(ios, ["--layout", "ios", "--launches", "3"] + options, ["sh", "-c", "echo $HOME"])
            #expect(result.status == 0, "\(result)")
            return Set(result.stdout.split(separator: "\n").map(String.init))
        }
        #expect(try homes([]).count == 1)
        #expect(try homes(["--relocate"]).count == 3)
        try expectCleanedUp(ios)
    }
}
