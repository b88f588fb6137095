/// The names of App Groups (SPEC §15, docs/groups.md): which identifiers are valid, where a
/// member's program finds a group inside the sandbox and which variable names it. Pure:
/// the tool decides membership from these, never the program.
public enum AppGroup {
    /// The prefix every group identifier has, as on iOS (`group.com.example.shared`).
    public static let prefix = "group."
    /// The folder inside the sandbox under which each member group is shown, at
    /// `/groups/ID` (`sandboxPath(of:)`); nothing else is ever there.
    public static let sandboxFolder = "/groups"
    /// The variable that lists the program's groups, separated by `:`.
    public static let listVariable = "APP_GROUPS"
    /// The longest identifier: it is a file name in the device folder.
    public static let maximumLength = 200

    /// Why `identifier` is not a group identifier, or nil when it is one: `group.` then
    /// one or more of ASCII letters, digits, `.`, `-` and `_`, no empty part between dots,
    /// at most `maximumLength` bytes. So it is always one harmless file name (no `/`, never
    /// `.` or `..`), and a variable name can be made of it.
    public static func problem(with identifier: String) -> String? {
        let bytes = Array(identifier.utf8)
        guard identifier.hasPrefix(prefix), bytes.count > prefix.utf8.count else {
            return "a group identifier starts with 'group.' and names the group, as group.com.example.shared"
        }
        guard bytes.count <= maximumLength else { return "a group identifier has at most \(maximumLength) characters" }
        let allowed = bytes.allSatisfy { byte in
            (byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "z")) || (byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z"))
                || (byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9"))
                || byte == UInt8(ascii: ".") || byte == UInt8(ascii: "-") || byte == UInt8(ascii: "_")
        }
        guard allowed else { return "a group identifier holds only ASCII letters, digits, '.', '-' and '_'" }
        guard !identifier.split(separator: ".", omittingEmptySubsequences: false).contains(where: \.isEmpty) else {
            return "a group identifier has no empty part between dots"
        }
        return nil
    }

    /// Where the member group `identifier` is inside the sandbox: `/groups/ID`.
    public static func sandboxPath(of identifier: String) -> String {
        sandboxFolder + "/" + identifier
    }

    /// The variable that holds the group's path inside the sandbox, as an app gets it from
    /// `containerURL(forSecurityApplicationGroupIdentifier:)`: `APP_GROUP_` and the part
    /// after `group.`, upper-cased, every `.` and `-` an `_`
    /// (`group.com.example.shared` → `APP_GROUP_COM_EXAMPLE_SHARED`).
    public static func environmentName(of identifier: String) -> String {
        let name = identifier.dropFirst(identifier.hasPrefix(prefix) ? prefix.count : 0)
        return "APP_GROUP_" + String(name.uppercased().map { $0 == "." || $0 == "-" ? "_" : $0 })
    }
}
