import ArgumentParser
import ContainerPolicy
import ContainerStore
import Glibc

/// `containerfs`: iOS-style app containers on Linux.
@main
struct ContainerFSCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "containerfs",
        abstract: "iOS-style app containers on Linux, enforced by a FUSE filesystem.",
        discussion: """
            Exit status: 0 success, 1 failure, 64 misuse of the command line, 75 a lock of the \
            store or device held by another process did not come free in time (the line names \
            it; nothing was changed: try again); run: the program's, 204 when it was killed at \
            suspension holding a lock in a shared group container (0xdead10cc).

            A command waits at most 10 s for a lock another process holds \
            (CONTAINERFS_LOCK_WAIT=SECONDS sets another bound). See docs/capacity.md.
            """,
        version: containerfsVersion,
        subcommands: [Create.self, CreateGroup.self, Update.self, Offload.self, Mount.self, Unmount.self, RunCommand.self, SuspendCommand.self, ResumeCommand.self, Deliver.self, Share.self, Verify.self, CheckCommand.self, Audit.self, PurgeCommand.self, UsageCommand.self, CapacityCommand.self, BackupCommand.self, RestoreCommand.self, BackupsCommand.self, ExcludeCommand.self, IncludeCommand.self, Protect.self, Lock.self, Unlock.self, Status.self, PowerCut.self]
    )

    /// ArgumentParser's `main`, except that a command line it cannot parse gets the one
    /// line SPEC §9 asks for (what is wrong, and where the usage is) instead of the usage.
    static func main() {
        var command: ParsableCommand
        do {
            command = try parseAsRoot()
        } catch {
            let status = exitCode(for: error)
            // --help and --version are parse "errors" with a full text to print.
            if status == .success { exit(withError: error) }
            let what = message(for: error).split(separator: "\n").first.map(String.init) ?? "bad command line"
            let named = CommandLine.arguments.dropFirst().first { word in
                configuration.subcommands.contains { $0._commandName == word }
            }
            let help = ["containerfs", named, "--help"].compactMap { $0 }.joined(separator: " ")
            FileHandleOutput.standardError.write("containerfs: \(what): see '\(help)'\n")
            Glibc.exit(status.rawValue)
        }
        // Walks of the store hold a descriptor per folder level (docs/architecture.md).
        DescriptorLimit.raise()
        do {
            try command.run()
        } catch {
            exit(withError: error)
        }
    }
}

/// Runs a command body, printing a `UserError` as the one line SPEC §9 asks for.
func reportingErrors(_ body: () throws -> Void) throws {
    do {
        try body()
    } catch let error as UserError {
        // One line, and nothing in it can drive the terminal: names are escaped where they
        // are interpolated (ContainerPath.description); this catches what a server sent.
        let line = String(error.message.unicodeScalars.map { ContainerPath.escapedControl($0) ?? String($0) }.joined())
        FileHandleOutput.standardError.write("containerfs: \(line)\n")
        throw ExitCode(error.exitCode)
    }
}
