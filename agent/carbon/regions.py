"""The region table as data: cloud regions and ISO country codes -> provider, grid zone, level.

Each entry names the provider (which sets the PUE) and the Electricity Maps zone whose 2022
hourly trace gives the region its time profile. A region's annual level, and the source of
that level, is decided by ``agent/carbon/annual.py`` (Ember national figures, subnational
rows, else the zone's 2022 mean in ``agent/carbon/data/profiles.json``).

Zone choices follow where the provider's data centres sit (the provider's region page) and
the balancing area Electricity Maps assigns to that place; regions whose grid is not in the
2022 data set (e.g. me-south-1 Bahrain, cn-north-1) are left out and score as
``out_of_table`` rather than borrowing a neighbour's grid.
"""

from __future__ import annotations

#: Power usage effectiveness per provider. The values are fixed by the design notes (issue 2);
#: the comparison figures beside them are what the cited public sources publish.
PUE: dict[str, float] = {
    "aws": 1.15,  # design notes; Cloud Carbon Footprint's methodology uses 1.135 for AWS
    "gcp": 1.09,  # design notes; Google's environmental reports give a fleet PUE of ~1.10
    "azure": 1.17,  # design notes; Cloud Carbon Footprint's methodology uses 1.185 for Azure
    "iso": 1.5,  # generic data centre; Uptime Institute's global survey average is ~1.55
}

PUE_SOURCES: dict[str, str] = {
    "aws": "1.15 (design notes; cf. Cloud Carbon Footprint methodology 1.135)",
    "gcp": "1.09 (design notes; cf. Google environmental report fleet PUE ~1.10)",
    "azure": "1.17 (design notes; cf. Cloud Carbon Footprint methodology 1.185)",
    "iso": "1.5 generic (design notes; cf. Uptime Institute global survey ~1.55)",
}

AWS_ZONES: dict[str, str] = {
    "us-east-1": "US-MIDA-PJM",  # N. Virginia
    "us-east-2": "US-MIDA-PJM",  # Ohio
    "us-west-1": "US-CAL-CISO",  # N. California
    "us-west-2": "US-NW-BPAT",  # Oregon
    "us-gov-east-1": "US-MIDA-PJM",  # Ohio
    "us-gov-west-1": "US-NW-BPAT",  # Oregon
    "ca-central-1": "CA-QC",  # Montreal
    "sa-east-1": "BR-CS",  # Sao Paulo
    "eu-west-1": "IE",  # Dublin
    "eu-west-2": "GB",  # London
    "eu-west-3": "FR",  # Paris
    "eu-central-1": "DE",  # Frankfurt
    "eu-central-2": "CH",  # Zurich
    "eu-north-1": "SE-SE3",  # Stockholm
    "eu-south-1": "IT-NO",  # Milan
    "eu-south-2": "ES",  # Aragon
    "ap-northeast-1": "JP-TK",  # Tokyo
    "ap-northeast-2": "KR",  # Seoul
    "ap-northeast-3": "JP-KN",  # Osaka
    "ap-southeast-1": "SG",  # Singapore
    "ap-southeast-2": "AU-NSW",  # Sydney
    "ap-southeast-3": "ID",  # Jakarta
    "ap-southeast-4": "AU-VIC",  # Melbourne
    "ap-south-1": "IN-MH",  # Mumbai
    "ap-east-1": "HK",  # Hong Kong
    "af-south-1": "ZA",  # Cape Town
    "il-central-1": "IL",  # Tel Aviv
}

GCP_ZONES: dict[str, str] = {
    "us-central1": "US-MIDW-MISO",  # Iowa
    "us-east1": "US-CAR-SCEG",  # South Carolina
    "us-east4": "US-MIDA-PJM",  # N. Virginia
    "us-east5": "US-MIDA-PJM",  # Columbus
    "us-west1": "US-NW-BPAT",  # Oregon
    "us-west2": "US-CAL-LDWP",  # Los Angeles
    "us-west3": "US-NW-PACE",  # Salt Lake City
    "us-west4": "US-NW-NEVP",  # Las Vegas
    "us-south1": "US-TEX-ERCO",  # Dallas
    "northamerica-northeast1": "CA-QC",  # Montreal
    "northamerica-northeast2": "CA-ON",  # Toronto
    "southamerica-east1": "BR-CS",  # Sao Paulo
    "southamerica-west1": "CL-SEN",  # Santiago
    "europe-west1": "BE",  # St. Ghislain
    "europe-west2": "GB",  # London
    "europe-west3": "DE",  # Frankfurt
    "europe-west4": "NL",  # Eemshaven
    "europe-west6": "CH",  # Zurich
    "europe-west8": "IT-NO",  # Milan
    "europe-west9": "FR",  # Paris
    "europe-north1": "FI",  # Hamina
    "europe-central2": "PL",  # Warsaw
    "europe-southwest1": "ES",  # Madrid
    "asia-east1": "TW",  # Changhua County
    "asia-east2": "HK",  # Hong Kong
    "asia-northeast1": "JP-TK",  # Tokyo
    "asia-northeast2": "JP-KN",  # Osaka
    "asia-northeast3": "KR",  # Seoul
    "asia-south1": "IN-MH",  # Mumbai
    "asia-southeast1": "SG",  # Singapore
    "asia-southeast2": "ID",  # Jakarta
    "australia-southeast1": "AU-NSW",  # Sydney
    "australia-southeast2": "AU-VIC",  # Melbourne
    "me-west1": "IL",  # Tel Aviv
    "africa-south1": "ZA",  # Johannesburg
}

AZURE_ZONES: dict[str, str] = {
    "eastus": "US-MIDA-PJM",  # Virginia
    "eastus2": "US-MIDA-PJM",  # Virginia
    "centralus": "US-MIDW-MISO",  # Iowa
    "northcentralus": "US-MIDA-PJM",  # Illinois (ComEd, PJM)
    "southcentralus": "US-TEX-ERCO",  # Texas
    "westus": "US-CAL-CISO",  # California
    "westus2": "US-NW-GCPD",  # Quincy, Washington
    "westus3": "US-SW-AZPS",  # Phoenix
    "canadacentral": "CA-ON",  # Toronto
    "canadaeast": "CA-QC",  # Quebec City
    "brazilsouth": "BR-CS",  # Sao Paulo
    "northeurope": "IE",  # Dublin
    "westeurope": "NL",  # Amsterdam
    "francecentral": "FR",  # Paris
    "francesouth": "FR",  # Marseille
    "germanywestcentral": "DE",  # Frankfurt
    "uksouth": "GB",  # London
    "ukwest": "GB",  # Cardiff
    "swedencentral": "SE-SE3",  # Gavle
    "norwayeast": "NO-NO1",  # Oslo
    "switzerlandnorth": "CH",  # Zurich
    "polandcentral": "PL",  # Warsaw
    "italynorth": "IT-NO",  # Milan
    "spaincentral": "ES",  # Madrid
    "japaneast": "JP-TK",  # Tokyo
    "japanwest": "JP-KN",  # Osaka
    "koreacentral": "KR",  # Seoul
    "southeastasia": "SG",  # Singapore
    "eastasia": "HK",  # Hong Kong
    "australiaeast": "AU-NSW",  # New South Wales
    "australiasoutheast": "AU-VIC",  # Victoria
    "centralindia": "IN-MH",  # Pune
    "southafricanorth": "ZA",  # Johannesburg
    "israelcentral": "IL",  # Israel
}

#: ISO 3166-1 alpha-2 codes whose whole country is one zone of the 2022 data set. Countries
#: split into several zones (``ISO_SPLIT``) have no zone here: an unweighted mean of their
#: zones would not be the country's intensity.
ISO_ZONES: dict[str, str] = {
    code.lower(): code
    for code in (
        "AT BA BE BG CH CY CZ DE EE ES FI FR GB GR HK HR HU ID IE IL KR LT LU LV NL NZ "
        "PA PE PL PT RO SG SI SK TR TW UY ZA"
    ).split()
}
ISO_ZONES["cl"] = "CL-SEN"  # Chile's national electric system

#: ISO codes of countries split into several zones: no zone, so no profile. Such a code is in
#: the table only when a national figure exists (``agent/carbon/annual.py``: Ember's for AU, IN,
#: IT, JP, NO, SE, US), scored at that annual value; DK, BR and CA stay out of the table.
ISO_SPLIT: tuple[str, ...] = ("au", "br", "ca", "dk", "in", "it", "jp", "no", "se", "us")

PROVIDER_ZONES: dict[str, dict[str, str]] = {
    "aws": AWS_ZONES,
    "gcp": GCP_ZONES,
    "azure": AZURE_ZONES,
    "iso": ISO_ZONES,
}

