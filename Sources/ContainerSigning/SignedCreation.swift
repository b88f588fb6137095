import ContainerStore

extension Store {
    /// Makes a new container at `path` holding a copy of the bundle at `bundlePath`, as
    /// `create(at:bundle:)` does; with `installerKey`, the copied bundle's manifest is
    /// recorded and signed (SPEC §5) before the store is complete.
    public static func create(at path: String, bundle bundlePath: String, installerKey: InstallerKey?) throws(UserError) -> Store {
        try create(at: path, bundle: bundlePath, seal: seal(installerKey))
    }

    /// The last step of building a store that records and signs its bundle's manifest with
    /// `installerKey`; none without a key.
    public static func seal(_ installerKey: InstallerKey?) -> Seal? {
        guard let installerKey else { return nil }
        return { rootFD, stateFD, bundleName in
            try BundleSignature.sign(rootFD: rootFD, stateFD: stateFD, bundleName: bundleName, key: installerKey)
        }
    }
}
