import ContainerPolicy
import PolicySpec
import Testing

/// The layout of an App Group container (docs/policy.md, docs/groups.md).
let groupLayout = ContainerLayout(groupIdentifier: bytes("group.com.example.shared"))

/// The locations of paths in a group container.
let groupClassificationCases: [ClassificationCase] = [
    .init("", .root),
    .init("Library", .standard(.library)),
    .init("Library/Caches", .standard(.caches)),
    .init("Library/Preferences", .standard(.preferences)),
    .init(".containerfs", .hidden),
    .init(".containerfs/format", .hidden),
    .init("Library/Caches/CACHEDIR.TAG", .hidden),
    // A backup's manifest folder: reserved, so that no member's file takes the manifest's path.
    .init(".containerfs-backup", .hidden),
    .init(".containerfs-backup/manifest", .hidden),
    .init("Library/.containerfs-backup", .inside(.data)),
    // The root is the members' to write: every other name there is data.
    .init("shared.sqlite", .inside(.data)),
    .init("Documents", .inside(.data)),
    .init("Documents/Inbox", .inside(.data)),
    .init("tmp", .inside(.data)),
    .init("tmp/x", .inside(.data)),
    .init("Demo.app", .inside(.data)),
    .init("Library/Application Support", .inside(.data)),
    .init("Library/notes.plist", .inside(.data)),
    .init("Library/Preferences/group.plist", .inside(.data)),
    .init("Library/Caches/thumbs/1.png", .inside(.cache)),
]

@Suite struct GroupLayoutTests {
    @Test(arguments: groupClassificationCases)
    func classifies(_ item: ClassificationCase) {
        #expect(groupLayout.location(of: ContainerPath(bytes: item.path)!) == item.expected)
    }

    /// What a member may do at the group's root and in its structure.
    @Test func rootIsWritableStructureIsFixed() {
        let file = groupLayout.location(of: path("shared.sqlite"))
        #expect(Policy.allows(.create(file)))
        #expect(Policy.allows(.delete(file)))
        #expect(Policy.allows(.rename(from: file, to: groupLayout.location(of: path("Library/x")), exchange: false)))
        #expect(Policy.decide(.delete(groupLayout.location(of: path("Library/Caches")))) == .deny(.structureIsFixed))
        #expect(Policy.decide(.changeMetadata(.root)) == .deny(.structureIsFixed))
        #expect(Policy.decide(.create(groupLayout.location(of: path(".containerfs")))) == .deny(.nameIsReserved))
        #expect(groupLayout.standardDirectories == [.library, .caches, .preferences])
        // An app container's root stays closed.
        #expect(Policy.decide(.create(layout.location(of: path("shared.sqlite")))) == .deny(.structureIsFixed))
    }

    @Test(arguments: [
        ("group.com.example.shared", true), ("group.a", true), ("group.A-b_c.9", true),
        ("com.example.shared", false), ("group.", false), ("group", false), ("group.a..b", false), ("group.a.", false),
        ("group.a/b", false), ("group.a b", false), ("group.é", false), ("group.\n", false),
        ("group." + String(repeating: "a", count: 195), false),
    ])
    func identifiers(_ identifier: String, _ valid: Bool) {
        #expect((AppGroup.problem(with: identifier) == nil) == valid)
    }

    @Test func pathsAndVariables() {
        #expect(AppGroup.sandboxPath(of: "group.com.example.shared") == "/groups/group.com.example.shared")
        #expect(AppGroup.environmentName(of: "group.com.example.shared") == "APP_GROUP_COM_EXAMPLE_SHARED")
        #expect(AppGroup.environmentName(of: "group.my-app.Widgets") == "APP_GROUP_MY_APP_WIDGETS")
    }
}
