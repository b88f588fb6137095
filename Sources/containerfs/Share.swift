import ArgumentParser
import ContainerPolicy
import ContainerStore
import Glibc

struct Share: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract:
            "List, add, replace, get, rename and delete files in a container's Documents/, as Finder and the Files app do (file sharing).",
        discussion: """
            containerfs share STORE ls [PATH] lists a folder of Documents/ (a folder ends in /); \
            put HOST [PATH] copies a host file or folder in (PATH: its name in Documents/, default \
            the host name; a file replaces a file of that name atomically, nothing else is \
            replaced); get PATH [HOST] copies one out (never overwriting; an existing folder \
            receives it); rm PATH deletes a file or folder; mv PATH NEWPATH renames, never \
            replacing. PATHs are relative to Documents/. Every path is taken as bytes: a \
            name that is not UTF-8, in Documents/ or on the host, is kept as given.

            As on iOS, only an app whose Info.plist sets UIFileSharingEnabled or \
            LSSupportsOpeningDocumentsInPlace to true shares its Documents/ (XML and binary \
            plists are read); otherwise share refuses with one line. Hidden files (a name \
            starting with .) and Documents/Inbox/ are neither shown nor reachable, symlinks \
            in the store are never followed, and only files and folders are shown; a \
            folder is copied in or out with just those (the line counts what was left \
            out). get never follows a symlink at its destination. What put copies in \
            belongs to the container's owner, whoever runs it, as what the app makes (root \
            copies in only what that owner may read). Works \
            whether the container is mounted or not: a running app's mount shows the change \
            at once. put is held to the container's capacity (see 'containerfs capacity'), \
            and to its device's free space in a device folder with a capacity, mounted or \
            not: one line says how much the copy adds in blocks (less the file it replaces) \
            and how much is free, and Documents/ is left as it was (exit 1); see \
            docs/capacity.md, "Installing on a full device". See docs/lifecycle.md.
            """)

    @Argument(help: "The container's store.")
    var store: String

    @Argument(help: "ls, put, get, rm or mv.")
    var action: String

    @Argument(help: ArgumentHelp("The action's paths.", valueName: "PATH"))
    var operands: [String] = []

    static let arity: [String: ClosedRange<Int>] = ["ls": 0...1, "put": 1...2, "get": 1...2, "rm": 1...1, "mv": 2...2]

    func validate() throws {
        guard let range = Self.arity[action] else { throw ValidationError("the action must be ls, put, get, rm or mv, not '\(action)'") }
        guard range.contains(operands.count) else {
            let usage =
                ["ls": "ls [PATH]", "put": "put HOST [PATH]", "get": "get PATH [HOST]", "rm": "rm PATH", "mv": "mv PATH NEWPATH"][action]
                ?? action
            throw ValidationError("write containerfs share STORE \(usage)")
        }
    }

    func run() throws {
        try reportingErrors {
            let opened = try Store.open(store, changing: action != "ls" && action != "get")
            // A group has no app, hence no Info.plist to enable sharing: said so, not "cannot read /Info.plist".
            try opened.requireApp(for: "share")
            try FileSharing.requireEnabled(opened)
            switch action {
            case "ls":
                let folder = try FileSharing.components(operands.first.map(rawArgument) ?? [], allowingTop: true)
                for entry in try FileSharing.list(opened, folder) {
                    let name = ContainerPath.printable(entry.name, escapingControls: true)
                    FileHandleOutput.standardOutput.write(entry.isFolder ? "\(name)/\n" : "\(name)\n")
                }
            case "put":
                let host = operands[0]
                let raw = rawArguments(operands)
                let name = operands.count > 1 ? raw[1] : Array(raw[0].split(separator: UInt8(ascii: "/")).last ?? [])
                // A device with a capacity refuses what does not fit; what fits goes to its
                // live count (docs/capacity.md, "Installing on a full device"), as `deliver`.
                let device = DeviceInstall(storePaths: [store])
                defer { device.finish() }
                let (path, leftOut) = try FileSharing.put(raw[0], to: try FileSharing.components(name), in: opened, device: device)
                // A mounted container's daemon counts the file (a recount) before the
                // device's reservation of it is given back.
                try ControlChannel.invalidate(opened, [path])
                FileHandleOutput.standardOutput.write("put \(host) as \(path)\(Self.leftOutNote(leftOut))\n")
            case "get":
                let components = try FileSharing.components(rawArgument(operands[0]))
                // The host path is bytes, as given (as put's): a name that is not UTF-8 is kept.
                let destination = operands.count > 1 ? rawArguments(operands)[1] : Array(".".utf8)
                let (written, leftOut) = try FileSharing.get(components, from: opened, to: destination)
                FileHandleOutput.standardOutput.write(
                    "got \(FileSharing.containerPath(components)) as \(ContainerPath.printable(written, escapingControls: true))\(Self.leftOutNote(leftOut))\n")
            case "rm":
                // What it frees goes to the device's live count while a sibling is mounted
                // (docs/capacity.md); a mounted container's daemon recounts at the invalidate.
                let settle = try DeviceCapacity.markChanges(storePaths: [store])
                defer { settle() }
                let path = try FileSharing.remove(try FileSharing.components(rawArgument(operands[0])), from: opened)
                try ControlChannel.invalidate(opened, [path])
                FileHandleOutput.standardOutput.write("removed \(path)\n")
            default:
                // As rm: a rename can grow the folder it goes into by a block, given to the
                // device's live count while a sibling is mounted; a mounted container's
                // daemon recounts at the invalidate.
                let settle = try DeviceCapacity.markChanges(storePaths: [store])
                defer { settle() }
                let paths = try FileSharing.move(
                    try FileSharing.components(rawArgument(operands[0])),
                    to: try FileSharing.components(rawArgument(operands[1])), in: opened)
                try ControlChannel.invalidate(opened, paths)
                FileHandleOutput.standardOutput.write("moved \(paths[0]) to \(paths[1])\n")
            }
        }
    }
}

extension Share {
    /// What a folder's copy left out, for the line that reports it ("" when nothing).
    static func leftOutNote(_ count: Int) -> String {
        count == 0 ? "" : " (left out \(count) hidden \(count == 1 ? "entry, symlink or special file" : "entries, symlinks or special files"): file sharing shows none)"
    }
}

/// The bytes `argument` was given as on the command line: ArgumentParser hands out
/// Strings, which replace bytes that are not UTF-8; names in a container are bytes, so the
/// raw argument whose decoding it is is used instead (the String's own bytes if none is).
func rawArgument(_ argument: String) -> [UInt8] {
    rawArguments([argument])[0]
}

/// The bytes each of `arguments` (an array option's values, in their order on the command
/// line) was given as: the n-th value that decodes to a String is the n-th such argument,
/// so two arguments that differ only in bytes that are not UTF-8 stay two.
func rawArguments(_ arguments: [String]) -> [[UInt8]] {
    var argv: [[UInt8]] = []
    for index in 1..<Int(CommandLine.argc) {
        guard let pointer = CommandLine.unsafeArgv[index] else { continue }
        argv.append(Array(UnsafeBufferPointer(start: UnsafeRawPointer(pointer).assumingMemoryBound(to: UInt8.self), count: strlen(pointer))))
    }
    var seen: [String: Int] = [:]
    return arguments.map { argument in
        let matches = argv.filter { String(decoding: $0, as: UTF8.self) == argument }
        let occurrence = seen[argument, default: 0]
        seen[argument] = occurrence + 1
        return matches.isEmpty ? Array(argument.utf8) : matches[min(occurrence, matches.count - 1)]
    }
}
